"""Signing in to a gated hub from a browser: a token pasted, or a join code redeemed for a member
token, kept in the ``mycelium_token`` cookie (HttpOnly, SameSite=Strict) that the token gate reads
(mycelium.auth.middleware). An open hub needs none of it: the page says so."""

from __future__ import annotations

from typing import Any

from litestar import Request, get, post
from litestar.response import Redirect, Template

from mycelium.api.deps import Annotated, Query, VerbsDep
from mycelium.auth import codes
from mycelium.auth.member_tokens import MemberTokensUnavailable
from mycelium.auth.middleware import TOKEN_COOKIE, principal_in
from mycelium.auth.tokens import TokenRefused, TokenVerifier
from mycelium.errors import Refusal
from mycelium.verbs import NOBODY
from mycelium.web.actions import back, form_of
from mycelium.web.pages import page

MAX_AGE = 30 * 24 * 3600


def _login(request: Request[Any, Any, Any], next_path: str, problem: str | None = None,
           status: int = 200) -> Template:
    return page("login.html", request, status, next=next_path, problem=problem,
                signed_in=principal_in(request.scope) is not None or bool(request.cookies.get(TOKEN_COOKIE)))


@get("/login")
async def login_page(request: Request[Any, Any, Any], target: Annotated[str, Query(name="next")] = "/"
                     ) -> Template:
    verifier: TokenVerifier | None = request.app.state.get("token_verifier")
    problem = None if verifier is not None else "this hub is open: nobody needs to sign in"
    return _login(request, back({"back": target}, "/"), problem)


@post("/login")
async def login(request: Request[Any, Any, Any], verbs: VerbsDep) -> Template | Redirect:
    form = await form_of(request)
    target = back(form, "/")
    verifier: TokenVerifier | None = request.app.state.get("token_verifier")
    if verifier is None:
        return _login(request, target, "this hub is open: nobody needs to sign in", 400)
    token = form.get("token")
    if token is None and form.get("code"):
        try:
            row = await verbs.call(NOBODY, "redeem_join_code", code_hash=codes.code_hash(form["code"]))
            token = request.app.state.member_tokens.sign(row["handle"], row["room"])[0]
        except Refusal as refused:
            return _login(request, target, refused.message, refused.status)
        except MemberTokensUnavailable as missing:
            return _login(request, target, str(missing), 503)
    if token is None:
        return _login(request, target, "paste a token or a join code", 400)
    try:
        await verifier.verify(token.strip())
    except TokenRefused as refused:
        return _login(request, target, f"the token is refused: {refused.reason}", 401)
    response = Redirect(path=target, status_code=303)
    response.set_cookie(TOKEN_COOKIE, token.strip(), max_age=MAX_AGE, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https", path="/")
    return response


@post("/logout")
async def logout(request: Request[Any, Any, Any]) -> Redirect:
    response = Redirect(path="/login", status_code=303)
    response.delete_cookie(TOKEN_COOKIE, path="/")
    return response


ROUTES: list[Any] = [login_page, login, logout]
