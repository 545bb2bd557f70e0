"""``mycelium up``: run the hub (embedded PostgreSQL unless a database URL is given)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from types import FrameType

from mycelium.hub import Hub
from mycelium.settings import load_settings


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("up", help="run the hub (HTTP API, workers, embedded database by default)")
    p.add_argument("--host", help="listen address (MYCELIUM_HOST, default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (MYCELIUM_PORT, default 8000)")
    p.add_argument("--data-dir", type=Path, help="data folder (MYCELIUM_DATA_DIR, default ./.mycelium)")
    p.add_argument("--database-url", help="use this PostgreSQL (DATABASE_URL) instead of the embedded one")
    p.add_argument("--no-mirror", action="store_true", help="do not export the markdown mirror")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
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
    app = create_app(settings, on_ready=lambda hub: _announce(hub, settings.host, settings.port))
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=args.log_level,
                            lifespan="on", access_log=False,
                            timeout_graceful_shutdown=5)  # long polls must not hold a stop
    server = Server(config)
    server.run()
    return 0 if server.started else 1


if __name__ == "__main__":
    sys.exit(run(argparse.Namespace()))
