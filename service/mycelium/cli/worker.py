"""``mycelium worker``: run the background loops with no HTTP, until SIGTERM or SIGINT.

It finds the database as ``mycelium up`` does (``DATABASE_URL``, else the embedded server in the
data folder, which it never creates). Any number of workers and hubs may run loops on one database:
loops with one leader hand over when their leader dies, the others share their work.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from mycelium import environment
from mycelium.cli.common import no_hub_data
from mycelium.settings import load_settings
from mycelium.workers import LOOP_NAMES

if TYPE_CHECKING:
    from mycelium.settings import Settings
    from mycelium.workers.loop import Loop

def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("worker", help="run the background loops (indexer, lease sweeper, mirror, "
                                      "receipt signer) without HTTP")
    p.add_argument("--data-dir", type=Path, help="data folder (MYCELIUM_DATA_DIR, default ./.mycelium)")
    p.add_argument("--database-url", help="use this PostgreSQL (DATABASE_URL) instead of the embedded one")
    p.add_argument("--only", action="append", metavar="LOOP[,LOOP…]",
                   help=f"run only these loops (of: {', '.join(LOOP_NAMES)})")
    p.add_argument("--skip", action="append", metavar="LOOP[,LOOP…]", help="run every loop but these")
    p.add_argument("--no-mirror", action="store_true", help="do not export the markdown mirror")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=run)


def _names(values: list[str] | None) -> list[str]:
    return [n.strip() for v in values or () for n in v.split(",") if n.strip()]


def run(args: argparse.Namespace) -> int:
    from mycelium.workers.catalogue import default_loops

    settings = load_settings(data_dir=args.data_dir, database_url=args.database_url)
    if args.no_mirror:
        settings = settings.model_copy(update={"mirror": False})
    only, skip = _names(args.only), _names(args.skip)
    try:
        loops = default_loops(settings, only, skip)
    except ValueError as exc:
        print(f"mycelium worker: {exc}", file=sys.stderr)
        return 2
    if not loops:
        print("mycelium worker: no loop left to run", file=sys.stderr)
        return 2
    if "indexer" not in {loop.name for loop in loops}:
        settings = settings.model_copy(update={"embedder": "none"})  # no model to load
    # --log-level is for the hub's own loggers; libraries speak at warnings and above
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("mycelium").setLevel(args.log_level.upper())
    from mycelium.db.embedded import NoCluster

    try:
        return asyncio.run(_serve(settings, loops))
    except NoCluster as missing:
        no_hub_data(environment.data_dir(args.data_dir), f"no hub database in {missing.pgdata}")


async def _serve(settings: Settings, loops: list[Loop]) -> int:
    from mycelium.hub import Hub

    stop = asyncio.Event()
    running = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        running.add_signal_handler(sig, stop.set)
    hub = Hub(settings, loops=loops, kind="worker", create_cluster=False)
    from mycelium.db.embedded import NoCluster

    try:
        await hub.start()
    except NoCluster:
        await hub.stop()
        raise
    except Exception as exc:
        print(f"mycelium worker: could not start: {type(exc).__name__}: {exc}", file=sys.stderr)
        await hub.stop()
        return 1
    try:
        assert hub.supervisor is not None
        where = ("the server at DATABASE_URL" if settings.database_url
                 else f"embedded, in {settings.resolved_data_dir()}")
        print(f"mycelium worker {hub.supervisor.worker_id}: loops {', '.join(lp.name for lp in loops)}; "
              f"database: {where}", flush=True)
        await stop.wait()
    finally:
        await hub.stop()
    print("mycelium worker: stopped", flush=True)
    return 0
