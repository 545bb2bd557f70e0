"""The asyncpg pool: JSON and vector codecs, and the app role where the server allows it."""

from __future__ import annotations

from typing import Any

import asyncpg
import msgspec
from pgvector.asyncpg import register_vector

_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.decode


def _encode_json(value: Any) -> str:
    return _json_encode(value).decode()


async def setup_connection(conn: asyncpg.Connection, role: str | None = None) -> None:
    """Codecs every hub connection uses; then act as ``role`` if this login may."""
    for typename in ("json", "jsonb"):
        await conn.set_type_codec(typename, encoder=_encode_json, decoder=_json_decode, schema="pg_catalog")
    await register_vector(conn)
    if role:
        allowed = await conn.fetchval(
            "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)"
            " AND pg_has_role(current_user, $1, 'MEMBER')",
            role,
        )
        if allowed:
            await conn.execute(f'SET ROLE "{role}"')


class HubConnection(asyncpg.Connection):  # type: ignore[misc]
    """A pooled connection that remembers which principal its session declares (the verb gateway
    declares a gated request's principal for the session, once, rather than in a transaction of
    every call: see ``mycelium.verbs.gateway``)."""

    __slots__ = ("_principal",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._principal: str | None = ""

    def declared_principal(self) -> str | None:
        """The declaration the session holds ('' for none), or None when it is not known (a
        declaration that did not come back): the next caller declares again."""
        return self._principal

    def note_principal(self, declared: str | None) -> None:
        self._principal = declared


async def _keep_session(_conn: asyncpg.Connection) -> None:
    """Released connections keep their session: the hub sets nothing on a session but its role,
    codecs and the principal the gateway declares (which the next call on it checks; verbs use
    transaction-local settings and locks), and an open transaction is still rolled back by the pool.
    The default reset would cost a round trip on every release."""


async def create_pool(dsn: str, *, role: str | None, min_size: int = 2, max_size: int = 20) -> asyncpg.Pool:
    async def init(conn: asyncpg.Connection) -> None:
        await setup_connection(conn, role)

    pool = await asyncpg.create_pool(dsn, min_size=min_size, max_size=max_size, init=init,
                                     reset=_keep_session, connection_class=HubConnection)
    assert pool is not None
    return pool
