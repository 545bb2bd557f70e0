"""Join codes: minted for a handle in a room (by whoever may act as that handle), redeemed once by
anyone who has the code (``/api/joins/redeem`` is open even on a gated hub), which makes the handle
a member and, on a gated hub, answers a member token."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from litestar import Controller, Request, post
from litestar.params import FromPath, JSONBody
from pydantic import BaseModel, ConfigDict, Field

from mycelium.api.deps import VERBS, VerbsDep
from mycelium.auth import codes
from mycelium.auth.member_tokens import MemberTokens, MemberTokensUnavailable
from mycelium.verbs import NOBODY, Actor


class JoinCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    handle: Annotated[str, Field(min_length=1, max_length=200)]
    ttl_seconds: Annotated[int, Field(ge=1, le=86_400, strict=True)] = codes.TTL_SECONDS


class JoinRedeem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: Annotated[str, Field(min_length=4, max_length=64)]


class JoinController(Controller):
    path = "/api/rooms/{room:str}/joins"
    dependencies = VERBS

    @post("/", status_code=201)
    async def mint(self, verbs: VerbsDep, room: FromPath[str], data: JSONBody[JoinCreate]) -> dict[str, Any]:
        code = codes.new_code()
        row = await verbs.call(Actor.declared(data.handle), "mint_join_code", room=room, handle=data.handle,
                               code_hash=codes.code_hash(code), ttl_seconds=data.ttl_seconds)
        return {"code": code, "room": row["room"], "handle": row["handle"], "expires_at": row["expires_at"]}


class RedeemController(Controller):
    path = "/api/joins/redeem"
    dependencies = VERBS

    @post("/", status_code=200)
    async def redeem(self, request: Request[Any, Any, Any], verbs: VerbsDep,
                     data: JSONBody[JoinRedeem]) -> dict[str, Any]:
        row = await verbs.call(NOBODY, "redeem_join_code", code_hash=codes.code_hash(data.code))
        members: MemberTokens | None = request.app.state.get("member_tokens")
        token: str | None = None
        expires: datetime | None = None
        note = None if members is not None else "the hub is not gated: no token is needed"
        if members is not None:
            try:
                token, exp = members.sign(row["handle"], row["room"])
                expires = datetime.fromtimestamp(exp).astimezone()
            except MemberTokensUnavailable as missing:
                note = str(missing)
        return {"room": row["room"], "handle": row["handle"], "token": token, "token_expires_at": expires,
                **({"note": note} if note else {})}


ROUTES: list[Any] = [JoinController, RedeemController]
