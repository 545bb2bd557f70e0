"""``mycelium up``: run the hub (embedded PostgreSQL unless a database URL is given)."""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import os
import socket
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from mycelium.settings import Settings, load_settings

if TYPE_CHECKING:
    from mycelium.db.embedded import EmbeddedPostgres

#: uvicorn's httptools protocol, each response sent in one write (see mycelium.api.http_protocol)
HTTP_PROTOCOL = "mycelium.api.http_protocol:OneSendHttpToolsProtocol"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("up", help="run the hub (HTTP API, background loops, embedded database by default)")
    p.add_argument("--host", help="listen address (MYCELIUM_HOST, default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (MYCELIUM_PORT, default 8000)")
    p.add_argument("--data-dir", type=Path, help="data folder (MYCELIUM_DATA_DIR, default ./.mycelium)")
    p.add_argument("--database-url", help="use this PostgreSQL (DATABASE_URL) instead of the embedded one")
    p.add_argument("--no-mirror", action="store_true", help="do not export the markdown mirror")
    p.add_argument("--no-workers", action="store_true",
                   help="serve HTTP only: leave the background loops to `mycelium worker` processes")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="HTTP processes serving this port (replicas on one database; default 1)")
    p.add_argument("-d", "--detach", action="store_true",
                   help="run in the background (log: <data>/hub.log; `mycelium status`, `logs`, `down`)")
    p.set_defaults(func=run)


def _announce(settings: Settings, embedded: EmbeddedPostgres | None, workers: int = 1,
              loops: bool = True) -> None:
    host, port = settings.host, settings.port
    processes = f"{workers} processes on this port; " if workers > 1 else ""
    lines = [f"mycelium hub on http://{host}:{port}  ({processes}health: http://{host}:{port}/health)"]
    if not loops:
        lines.append("background loops: off (HTTP only; run them with `mycelium worker`)")
    if embedded is not None:
        lines.append(f"embedded PostgreSQL in {embedded.pgdata}")
        lines.append(f"psql:  mycelium db psql   (or: {' '.join(embedded.psql_command())})")
    else:
        lines.append("database: the server at DATABASE_URL;  psql:  mycelium db psql")
    if loops:
        lines.append(f"markdown mirror: {settings.resolved_data_dir() / 'rooms'}"
                     if settings.mirror else "markdown mirror: off")
    lines.append(slim_line(settings, loops))
    print("\n".join(lines), flush=True)


def slim_line(settings: Settings, loops: bool) -> str:
    """What the announcement says of the rooms' SLIM channels."""
    from mycelium.slim.node import served
    from mycelium.slim.runtime import available
    from mycelium.slim.wire import dev_secret

    if settings.slim == "off":
        return "SLIM channels: off (MYCELIUM_SLIM=off)"
    missing = available()
    if missing is not None:
        return f"SLIM channels: off: {missing}"
    node = served()
    where = (f"node in this process on {node.endpoint}" if node is not None
             else f"node at {settings.slim_endpoint}")
    secret = " (development secret: set MYCELIUM_SLIM_SECRET)" if settings.slim_secret == dev_secret() else ""
    publishing = "" if loops else "; published by `mycelium worker` processes"
    return f"SLIM channels: {where}, identity {settings.slim_identity}{secret}{publishing}"


def serve_slim(settings: Settings) -> str | None:
    """Start the SLIM node in this process when the settings ask for one and nothing listens on its
    address yet; None, or the one line that says why the hub cannot use SLIM."""
    from mycelium.slim.node import Node
    from mycelium.slim.runtime import SlimUnavailable, available, reachable

    if settings.slim == "off" or not settings.slim_serve:
        return None
    if available() is not None:
        return None  # the announcement says SLIM is off, and why
    try:
        if not reachable(settings.slim_endpoint, 0.2):  # else: a node is there already; use it
            Node(settings.slim_endpoint).start()
    except (SlimUnavailable, ValueError) as exc:
        return str(exc)
    return None


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
    from mycelium.auth.gate import token_verifier
    from mycelium.auth.issuers import IssuerConfigError

    try:
        token_verifier(settings)  # the token gate's configuration, checked before anything starts
    except IssuerConfigError as exc:
        print(f"mycelium up: the token gate cannot start: {exc}", file=sys.stderr)
        return 2
    if not settings.database_url:  # the embedded server: said in one line what would stop it starting
        from mycelium.doctor import data_folder, embedded_binaries

        for check in (embedded_binaries(settings), data_folder(settings)):
            if check.state == "fail":
                print(f"mycelium up: {check.name}: {check.detail}", file=sys.stderr)
                return 1
    if args.detach and (running := background(settings)) is not None:
        print(f"mycelium up: a hub already runs in the background here (pid {running['pid']}, "
              f"{running['url']}): `mycelium down` stops it", file=sys.stderr)
        return 1
    busy = port_in_use(settings.host, settings.port)
    if busy is not None:
        print(f"mycelium up: cannot listen on {settings.host}:{settings.port}: {busy} "
              "(another hub? pick a port with --port or MYCELIUM_PORT)", file=sys.stderr)
        return 1
    if args.no_mirror:
        settings = settings.model_copy(update={"mirror": False})
    settings.resolved_data_dir().mkdir(parents=True, exist_ok=True)
    if args.detach:
        return detach(settings)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    loops = not args.no_workers
    problem = serve_slim(settings)
    if problem is not None:
        print(f"mycelium up: SLIM channels: {problem} (MYCELIUM_SLIM=off runs the hub without them)",
              file=sys.stderr)
        return 1
    if args.workers > 1:
        return _run_workers(settings, args.workers, args.log_level, loops)
    app = create_app(settings, loops=loops, on_ready=lambda hub: _announce(hub.settings, hub.embedded,
                                                                             loops=loops))
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=args.log_level,
                            lifespan="on", access_log=False, http=HTTP_PROTOCOL,
                            timeout_graceful_shutdown=5)  # long polls must not hold a stop
    server = Server(config)
    server.run()
    return 0 if server.started else 1


def background(settings: Settings) -> dict[str, object] | None:
    """The record of the hub ``up -d`` left running in this data folder, if it still runs."""
    from mycelium.cli.stack import alive, read_pid

    running = read_pid(settings.resolved_data_dir())
    return running if running is not None and alive(int(running["pid"])) else None


def detach(settings: Settings, timeout: float = 180.0) -> int:
    """``up -d``: this same command line without ``-d``, in a session of its own, its output in
    ``<data>/hub.log``; returns once its ``/health`` answers (or it failed, showing its log's end)."""
    import subprocess
    import time

    import httpx

    from mycelium.cli.stack import LOG_FILE, PID_FILE, write_pid

    folder = settings.resolved_data_dir()
    argv = [a for a in sys.argv[1:] if a not in ("-d", "--detach")]
    if "up" not in argv:
        argv = ["up", *argv]
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    url = f"http://{host}:{settings.port}"
    with open(folder / LOG_FILE, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "mycelium.cli.main", *argv], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "MYCELIUM_DATA_DIR": str(folder)})
    write_pid(folder, proc.pid, url)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            (folder / PID_FILE).unlink(missing_ok=True)
            tail = (folder / LOG_FILE).read_text(errors="replace").splitlines()[-15:]
            print(f"mycelium up: the hub stopped (exit code {proc.returncode}); the end of "
                  f"{folder / LOG_FILE}:\n" + "\n".join(tail), file=sys.stderr)
            return 1
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                print(f"mycelium hub running in the background (pid {proc.pid}) on {url}\n"
                      f"log: {folder / LOG_FILE}  (mycelium logs -f)   status: mycelium status   "
                      f"stop: mycelium down", flush=True)
                return 0
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    print(f"mycelium up: the hub did not answer on {url} within {timeout:g} s; it goes on starting in the "
          f"background (pid {proc.pid}): `mycelium logs` shows what it does, `mycelium down` stops it",
          file=sys.stderr)
    return 1


def port_in_use(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on (bound as uvicorn binds it), or None if it can."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        return f"no such address ({exc.strerror})"
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return "the port is in use" if exc.errno == errno.EADDRINUSE else exc.strerror or str(exc)
    return None


def _run_workers(settings: Settings, workers: int, log_level: str, loops: bool) -> int:
    """Several hub processes on one port. They are replicas on one database like any others (every
    rule and every lock is the database's; each process has its own pool and its one listener), so
    a machine with more cores than one Python process can use serves more. The parent migrates once
    and, without a database URL, keeps the embedded server up; each worker builds its own app."""
    import uvicorn

    from mycelium.db.embedded import EmbeddedPostgres
    from mycelium.db.migrate import upgrade_on_start

    embedded = None
    dsn = settings.database_url
    if not dsn:
        embedded = EmbeddedPostgres(settings.resolved_data_dir())
        dsn = embedded.attach()
    try:
        if settings.migrate_on_start:
            asyncio.run(upgrade_on_start(dsn))
        os.environ.update({
            "MYCELIUM_DATABASE_URL": dsn, "MYCELIUM_MIGRATE_ON_START": "false",
            "MYCELIUM_DATA_DIR": str(settings.resolved_data_dir()),
            "MYCELIUM_MIRROR": str(settings.mirror).lower(),
            "MYCELIUM_HOST": settings.host, "MYCELIUM_PORT": str(settings.port),
        })
        _announce(settings, embedded, workers, loops)
        factory = "mycelium.api.app:create_app" if loops else "mycelium.api.app:create_http_app"
        uvicorn.run(factory, factory=True, host=settings.host, port=settings.port,
                    workers=workers, log_level=log_level, lifespan="on", access_log=False,
                    http=HTTP_PROTOCOL, timeout_graceful_shutdown=5)
    finally:
        if embedded is not None:
            embedded.detach()
    return 0
