"""Which store a ledger uses when none is passed: ``MYCELIUM_LEDGER_URL`` (a PostgreSQL DSN, or the
hub's ``http(s)://`` URL), else ``DATABASE_URL``. One ledger per URL per process, shared by the tools."""

from __future__ import annotations

import os
import threading

from mycelium.ledger.errors import LedgerStorageUnavailableError
from mycelium.ledger.ledger import ActionLedger
from mycelium.ledger.storage import LedgerStorage

_shared: dict[str, ActionLedger] = {}
_lock = threading.Lock()


def storage_for(url: str, *, install_schema: bool = True) -> LedgerStorage:
    """A store for a URL: ``postgresql://…`` directly, ``http(s)://…`` through the hub.
    ``install_schema`` is the Postgres store's (see :class:`PostgresLedgerStorage`)."""
    if url.startswith(("http://", "https://")):
        from mycelium.ledger.hub_http import HubLedgerStorage

        return HubLedgerStorage(url)
    if url.startswith(("postgresql://", "postgres://")):
        from mycelium.ledger.postgres import PostgresLedgerStorage

        return PostgresLedgerStorage(url, install_schema=install_schema)
    raise ValueError(f"not a ledger URL (postgresql://… or http(s)://…): {url!r}")


def default_url() -> str:
    url = (
        os.environ.get("MYCELIUM_LEDGER_URL")
        or os.environ.get("MYCELIUM_DATABASE_URL")
        or os.environ.get("DATABASE_URL")
    )
    if not url:
        raise LedgerStorageUnavailableError(
            "no ledger store: pass storage=…, or set MYCELIUM_LEDGER_URL to the hub's database "
            "(postgresql://…) or URL (http://…)"
        )
    return url


def shared_ledger(url: str | None = None) -> ActionLedger:
    """The process's ledger for ``url`` (default: the environment's), made on first use."""
    url = url or default_url()
    with _lock:
        led = _shared.get(url)
        if led is None:
            led = _shared[url] = ActionLedger(storage_for(url))
        return led
