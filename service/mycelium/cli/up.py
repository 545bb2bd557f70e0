"""``mycelium up``: run the hub (embedded PostgreSQL unless a database URL is given)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from types import FrameType

from mycelium.hub import Hub
from mycelium.settings import Settings, load_settings


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("up", help="run the hub (HTTP API, workers, embedded database by default)")
    p.add_argument("--host", help="listen address (MYCELIUM_HOST, default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (MYCELIUM_PORT, default 8000)")
    p.add_argument("--data-dir", type=Path, help="data folder (MYCELIUM_DATA_DIR, default ./.mycelium)")
    p.add_argument("--database-url", help="use this PostgreSQL (DATABASE_URL) instead of the embedded one")
    p.add_argument("--no-mirror", action="store_true", help="do not export the markdown mirror")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="hub processes serving this port (replicas on one database; default 1)")
    p.set_defaults(func=run)


def _announce(hub: Hub, host: str, port: int) -> None:
    lines = [f"mycelium hub on http://{host}:{port}  (health: http://{host}:{port}/health)"]
    if hub.embedded is not None:
        lines.append(f"embedded PostgreSQL in {hub.embedded.pgdata}")
        lines.append(f"psql:  mycelium db psql   (or: {' '.join(hub.embedded.psql_command())})")
    else:
        lines.append("database: the server at DATABASE_URL;  psql:  mycelium db psql")
    lines.append(f"markdown mirror: {hub.settings.resolved_data_dir() / 'rooms'}"
                 if hub.settings.mirror else "markdown mirror: off")
    print("\n".join(lines), flush=True)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            super().handle_exit(sig, frame)
            # a stop signal ends the hub after its graceful shutdown, with exit status 0 (uvicorn
            # would re-raise the signal once shut down)
            self._captured_signals.clear()

    from mycelium.api.app import create_app

    settings = load_settings(host=args.host, port=args.port, data_dir=args.data_dir,
                             database_url=args.database_url)
    if args.no_mirror:
        settings = settings.model_copy(update={"mirror": False})
    settings.resolved_data_dir().mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    if getattr(args, "workers", 1) > 1:
        return _run_workers(settings, args.workers, args.log_level)
    app = create_app(settings, on_ready=lambda hub: _announce(hub, settings.host, settings.port))
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=args.log_level,
                            lifespan="on", access_log=False,
                            timeout_graceful_shutdown=5)  # long polls must not hold a stop
    server = Server(config)
    server.run()
    return 0 if server.started else 1



def _run_workers(settings: Settings, workers: int, log_level: str) -> int:
    """Several hub processes on one port. They are replicas on one database like any others (every
    rule and every lock is the database's; each process has its own pool and its one listener), so
    a machine with more cores than one Python process can use serves more. The parent migrates once
    and, without a database URL, keeps the embedded server up; each worker builds its own app."""
    import uvicorn

    from mycelium.db.embedded import EmbeddedPostgres
    from mycelium.db.migrate import upgrade

    embedded = None
    dsn = settings.database_url
    if not dsn:
        embedded = EmbeddedPostgres(settings.resolved_data_dir())
        dsn = embedded.attach()
    try:
        if settings.migrate_on_start:
            upgrade(dsn)
        os.environ.update({
            "MYCELIUM_DATABASE_URL": dsn, "MYCELIUM_MIGRATE_ON_START": "false",
            "MYCELIUM_DATA_DIR": str(settings.resolved_data_dir()),
            "MYCELIUM_MIRROR": str(settings.mirror).lower(),
            "MYCELIUM_HOST": settings.host, "MYCELIUM_PORT": str(settings.port),
        })
        print(f"mycelium hub on http://{settings.host}:{settings.port}  ({workers} worker processes; "
              f"health: http://{settings.host}:{settings.port}/health)", flush=True)
        if embedded is not None:
            print(f"embedded PostgreSQL in {embedded.pgdata}", flush=True)
        uvicorn.run("mycelium.api.app:create_app", factory=True, host=settings.host, port=settings.port,
                    workers=workers, log_level=log_level, lifespan="on", access_log=False,
                    timeout_graceful_shutdown=5)
    finally:
        if embedded is not None:
            embedded.detach()
    return 0

if __name__ == "__main__":
    sys.exit(run(argparse.Namespace()))
