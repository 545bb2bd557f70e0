"""The stack commands: ``mycelium status``, ``mycelium logs [-f]``, ``mycelium down``.

``mycelium up -d`` runs the hub in the background: its process in a session of its own, its output
in ``<data>/hub.log``, its pid and address in ``<data>/hub.pid``. ``down`` stops that hub (SIGTERM,
then SIGKILL after ``--timeout``), ``logs`` prints (``-f``: follows) its log, and ``status`` asks a
hub's ``/health`` (``MYCELIUM_API_URL``, else the background hub's address, else the settings') and
says in one line each how the hub, its database, its workers, its loops and SLIM are. Each exits
non-zero when what it reports is not well.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PID_FILE = "hub.pid"
LOG_FILE = "hub.log"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    s = sub.add_parser("status")
    s.add_argument("--data-dir", type=Path, help="the data folder of a background hub (MYCELIUM_DATA_DIR)")
    s.add_argument("--json", action="store_true", help="print the hub's /health as it is")
    s.set_defaults(func=status)
    lg = sub.add_parser("logs")
    lg.add_argument("--data-dir", type=Path, help="the data folder of a background hub (MYCELIUM_DATA_DIR)")
    lg.add_argument("-f", "--follow", action="store_true", help="go on printing what the hub writes")
    lg.add_argument("-n", "--lines", type=int, default=50, help="how many of the last lines (default 50)")
    lg.set_defaults(func=logs)
    d = sub.add_parser("down")
    d.add_argument("--data-dir", type=Path, help="the data folder of a background hub (MYCELIUM_DATA_DIR)")
    d.add_argument("--timeout", type=float, default=30.0,
                   help="seconds to wait before killing it (default 30)")
    d.set_defaults(func=down)


def data_dir(given: Path | None) -> Path:
    from mycelium.settings import load_settings

    return load_settings(data_dir=given).resolved_data_dir()


def read_pid(folder: Path) -> dict[str, Any] | None:
    """The background hub's record, or None when there is none (or it cannot be read)."""
    try:
        got = json.loads((folder / PID_FILE).read_text())
    except (OSError, ValueError):
        return None
    return got if isinstance(got, dict) and isinstance(got.get("pid"), int) else None


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running ``mycelium`` process (a pid the system gave to another program
    since is not ours)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc: trust the pid
    return b"mycelium" in cmdline


def write_pid(folder: Path, pid: int, url: str) -> None:
    record = {"pid": pid, "url": url, "data_dir": str(folder), "started_at": datetime.now(UTC).isoformat()}
    tmp = folder / f".{PID_FILE}.tmp"
    tmp.write_text(json.dumps(record) + "\n")
    tmp.replace(folder / PID_FILE)


def down(args: argparse.Namespace) -> int:
    folder = data_dir(args.data_dir)
    record = read_pid(folder)
    if record is None:
        print(f"mycelium down: no background hub in {folder} (one started with `mycelium up -d`)",
              file=sys.stderr)
        return 1
    pid = record["pid"]
    if not alive(pid):
        (folder / PID_FILE).unlink(missing_ok=True)
        print(f"the background hub (pid {pid}) had stopped already; its record is removed")
        return 0
    began = time.monotonic()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    while alive(pid) and time.monotonic() - began < args.timeout:
        time.sleep(0.1)
    killed = False
    if alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        killed = True
        while alive(pid) and time.monotonic() - began < args.timeout + 10:
            time.sleep(0.1)
    (folder / PID_FILE).unlink(missing_ok=True)
    how = f"killed after {args.timeout:g} s" if killed else f"stopped in {time.monotonic() - began:.1f} s"
    print(f"the hub at {record.get('url', '?')} (pid {pid}) {how}")
    return 0


def logs(args: argparse.Namespace) -> int:
    folder = data_dir(args.data_dir)
    path = folder / LOG_FILE
    if not path.exists():
        print(f"mycelium logs: no log in {folder} (a hub started with `mycelium up -d` writes "
              f"{LOG_FILE} there)", file=sys.stderr)
        return 1
    with open(path, "rb") as f:
        lines = f.read().decode("utf-8", "replace").splitlines()
        for line in lines[-max(args.lines, 0):] if args.lines else []:
            print(line)
        sys.stdout.flush()
        if not args.follow:
            return 0
        try:
            while True:
                chunk = f.read()
                if chunk:
                    sys.stdout.write(chunk.decode("utf-8", "replace"))
                    sys.stdout.flush()
                else:
                    time.sleep(0.2)
        except KeyboardInterrupt:
            return 0


def hub_url(folder: Path | None) -> tuple[str, str]:
    """Where ``status`` looks, and why there."""
    from mycelium.settings import load_settings

    if os.environ.get("MYCELIUM_API_URL"):
        return os.environ["MYCELIUM_API_URL"].rstrip("/"), "MYCELIUM_API_URL"
    record = read_pid(data_dir(folder))
    if record is not None and alive(record["pid"]):
        return str(record["url"]), f"the background hub (pid {record['pid']})"
    settings = load_settings()
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    return f"http://{host}:{settings.port}", "the settings (MYCELIUM_HOST, MYCELIUM_PORT)"


def status_lines(url: str, body: dict[str, Any]) -> tuple[list[tuple[str, bool, str]], bool]:
    """One (what, ok, words) per part of the hub, and whether all is well."""
    rows: list[tuple[str, bool, str]] = []
    problems = body.get("problems") or []
    rows.append(("hub", body.get("status") == "ok",
                 f"{body.get('status')} at {url}, version {body.get('version')}"
                 + (f"; {'; '.join(problems)}" if problems else "")))
    behind = body.get("migration") != body.get("migration_head")
    head = f" (the code's head is {body.get('migration_head')}: mycelium db upgrade)" if behind else ""
    rows.append(("database", not behind,
                 f"{body.get('database')} PostgreSQL {body.get('postgres')}, "
                 f"pgvector {body.get('pgvector')}, revision {body.get('migration')}{head}"))
    workers = body.get("workers") or []
    alive_ = [w for w in workers if w.get("alive")]
    rows.append(("workers", bool(alive_),
                 f"{len(alive_)} alive of {len(workers)}: "
                 + ", ".join(f"{w['kind']} {w['host']}:{w['pid']}" for w in alive_) if workers
                 else "none recorded"))
    loops: dict[str, list[str]] = {}
    for w in alive_:
        for lp in w.get("loops") or []:
            loops.setdefault(lp["loop"], []).append(lp["state"] + (" (stuck)" if lp.get("stuck") else ""))
    bad = [name for name, states in loops.items() if any("failing" in s or "stuck" in s for s in states)]
    leaders = body.get("leaders") or {}
    rows.append(("loops", not bad,
                 ", ".join(f"{name} {'/'.join(sorted(set(states)))}"
                           + (" (led)" if name in leaders else "") for name, states in sorted(loops.items()))
                 or "none running"))
    slim = body.get("slim") or {}
    state = slim.get("state", "off")
    ok = state != "on" or bool(slim.get("reachable"))
    detail = (f"on, node {slim.get('node')} at {slim.get('endpoint')}, identity {slim.get('identity')}, "
              f"{len(slim.get('channels') or [])} channel(s)" if state == "on"
              else f"{state}" + (f": {slim.get('reason')}" if slim.get("reason") else ""))
    rows.append(("slim", ok, detail + ("" if ok else " (the node does not answer)")))
    return rows, all(r[1] for r in rows)


def status(args: argparse.Namespace) -> int:
    import httpx

    url, why = hub_url(args.data_dir)
    try:
        r = httpx.get(f"{url}/health", timeout=5.0)
        body = r.json()
    except (httpx.HTTPError, ValueError) as exc:
        print(f"hub       FAIL  nothing answers at {url} (from {why}): {exc.__class__.__name__}: {exc}")
        return 1
    if args.json:
        print(json.dumps(body, indent=2, default=str))
        return 0 if body.get("status") == "ok" else 1
    rows, well = status_lines(url, body)
    for what, ok, words in rows:
        print(f"{what:<9} {'ok  ' if ok else 'FAIL'}  {words}")
    return 0 if well else 1
