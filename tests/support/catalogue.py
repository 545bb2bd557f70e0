"""A database's schema as a catalogue (mycelium.schema_catalogue()), to compare two databases."""

from __future__ import annotations

import asyncpg

from mycelium.db import schema


async def catalogue(dsn: str) -> set[tuple[str, str, str]]:
    conn = await asyncpg.connect(dsn)
    try:
        return {tuple(r) for r in await conn.fetch("SELECT kind, name, definition FROM mycelium.schema_catalogue()")}
    finally:
        await conn.close()


def differences(a: set, b: set) -> list[str]:
    return [f"only in the first: {r}" for r in sorted(a - b)] + [f"only in the second: {r}" for r in sorted(b - a)]


async def install(dsn: str) -> str:
    """Build the schema from sql/ alone (schema.install); the revision it records."""
    conn = await asyncpg.connect(dsn)
    try:
        return await schema.install(conn)
    finally:
        await conn.close()
