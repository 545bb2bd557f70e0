"""Which store a ledger uses when none is passed, and the store a URL names.

``MYCELIUM_LEDGER_URL`` (else ``MYCELIUM_DATABASE_URL``, else ``DATABASE_URL``) names a shared store:
``memory:``, ``file:///folder``, ``redis://…`` (or ``rediss://``), ``postgresql://…`` or the hub's
``http(s)://…`` URL. With none of them set, the ledger keeps its transitions in this process's memory
and says once that this protects this process only. One ledger per URL per process.
"""

from __future__ import annotations

import os
import threading
import warnings
from urllib.parse import unquote, urlsplit

from mycelium.ledger.ledger import ActionLedger
from mycelium.ledger.storage import LedgerStorage

MEMORY_URL = "memory:"
_shared: dict[str, ActionLedger] = {}
_lock = threading.Lock()
_warned = False


def storage_for(url: str, *, install_schema: bool = True) -> LedgerStorage:
    """A new store for a URL (see the module docstring). ``install_schema`` is the Postgres store's
    (see :class:`PostgresLedgerStorage`)."""
    if url == MEMORY_URL or url.startswith("memory://"):
        from mycelium.ledger.local import InMemoryLedgerStorage

        return InMemoryLedgerStorage()
    if url.startswith("file:"):
        from mycelium.ledger.local import FileLedgerStorage

        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost") or not parts.path:
            raise ValueError(f"a file ledger URL names a local folder, file:///path/to/folder: {url!r}")
        return FileLedgerStorage(unquote(parts.path))
    if url.startswith(("redis://", "rediss://", "unix://")):
        from mycelium.ledger.redis_store import RedisLedgerStorage

        return RedisLedgerStorage(url)
    if url.startswith(("http://", "https://")):
        from mycelium.ledger.hub_http import HubLedgerStorage

        return HubLedgerStorage(url)
    if url.startswith(("postgresql://", "postgres://")):
        from mycelium.ledger.postgres import PostgresLedgerStorage

        return PostgresLedgerStorage(url, install_schema=install_schema)
    raise ValueError(
        "not a ledger URL (memory:, file:///folder, redis://…, postgresql://… or http(s)://…): " + repr(url)
    )


def default_url() -> str:
    """The environment's ledger URL, or ``memory:`` (warned about once per process)."""
    url = (
        os.environ.get("MYCELIUM_LEDGER_URL")
        or os.environ.get("MYCELIUM_DATABASE_URL")
        or os.environ.get("DATABASE_URL")
    )
    if url:
        return url
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(
            "no ledger store configured: transitions are kept in this process's memory, which "
            "protects this process only (another worker, or a restart, runs a redispatched call "
            "again); set MYCELIUM_LEDGER_URL (file:///folder, redis://…, postgresql://… or the "
            "hub's http(s)://… URL) for a shared store",
            UserWarning,
            stacklevel=3,
        )
    return MEMORY_URL


def shared_ledger(url: str | None = None) -> ActionLedger:
    """The process's ledger for ``url`` (default: the environment's), made on first use."""
    url = url or default_url()
    with _lock:
        led = _shared.get(url)
        if led is None:
            led = _shared[url] = ActionLedger(storage_for(url))
        return led


def default_storage() -> LedgerStorage:
    """The store of the process's default ledger (what ``ActionLedger()`` uses)."""
    return shared_ledger().storage
