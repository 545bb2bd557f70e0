"""One data directory, found, never invented: ``--data-dir``, then ``MYCELIUM_DATA_DIR``, then the
nearest ``.mycelium`` in the working directory or above it, else ``./.mycelium``. Only ``mycelium
up`` creates one; every other command that finds no hub there says where it looked and exits 1."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from mycelium import environment
from mycelium.db.migrate import head_revision
from mycelium.settings import Settings
from tests.support.processes import free_port

pytestmark = pytest.mark.slow

UNSET = ("MYCELIUM_DATA_DIR", "DATABASE_URL", "MYCELIUM_DATABASE_URL")


def plain_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    return {**env, "MYCELIUM_EMBEDDER": "none", **extra}


def mycelium(cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120):
    return subprocess.run([sys.executable, "-m", "mycelium.cli.main", *args], cwd=cwd, env=env or plain_env(),
                          capture_output=True, text=True, timeout=timeout)


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def nowhere(tmp_path) -> Path:
    """An empty working directory with no .mycelium in it or above it."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    assert not any((p / ".mycelium").exists() for p in (folder, *folder.parents)), \
        "a .mycelium folder above the test's temporary folder would be found"
    return folder


@pytest.mark.parametrize(("args", "missing"), [
    (("db", "psql"), "no hub database in {data}/pg"),
    (("db", "upgrade"), "no hub database in {data}/pg"),
    (("db", "current"), "no hub database in {data}/pg"),
    (("db", "downgrade", "base"), "no hub database in {data}/pg"),
    (("worker",), "no hub database in {data}/pg"),
    (("mirror", "export"), "no hub data directory at {data}"),
])
def test_a_command_run_where_there_is_no_hub_says_where_it_looked_and_creates_nothing(nowhere, args, missing):
    done = mycelium(nowhere, *args)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    data = nowhere / ".mycelium"
    lines = done.stderr.splitlines()
    assert lines[0] == missing.format(data=data)
    assert f"data directory: {data} (the default: there is no .mycelium folder in {nowhere} or above it)" in lines[1]
    assert "`mycelium up` creates a hub there" in done.stderr and "--data-dir" in done.stderr
    assert tree(nowhere) == []


@pytest.mark.parametrize("args", [("db", "psql"), ("db", "upgrade"), ("mirror", "export")])
def test_a_named_data_directory_that_does_not_exist_is_not_made(nowhere, args):
    new = nowhere / "NEW"
    by_flag = mycelium(nowhere, *args, "--data-dir", str(new))
    assert by_flag.returncode == 1 and "Traceback" not in by_flag.stderr
    assert f"data directory: {new} (given with --data-dir)" in by_flag.stderr
    by_env = mycelium(nowhere, *args, env=plain_env(MYCELIUM_DATA_DIR=str(new)))
    assert by_env.returncode == 1 and f"data directory: {new} (set by MYCELIUM_DATA_DIR)" in by_env.stderr
    (nowhere / ".env").write_text(f"MYCELIUM_DATA_DIR='{new}'\n")
    by_file = mycelium(nowhere, *args)
    assert by_file.returncode == 1 and f"data directory: {new} (set by MYCELIUM_DATA_DIR)" in by_file.stderr
    assert tree(nowhere) == [".env"]


def test_a_data_directory_without_a_database_gets_none(nowhere):
    """A hub on DATABASE_URL keeps its mirror and keys in a data directory with no cluster: psql on
    the embedded server there is refused, not initdb'd."""
    data = nowhere / "hub-data"
    (data / "rooms").mkdir(parents=True)
    done = mycelium(nowhere, "db", "psql", "--data-dir", str(data))
    assert done.returncode == 1 and done.stderr.splitlines()[0] == f"no hub database in {data}/pg"
    assert tree(data) == ["rooms"]


async def test_mirror_export_on_a_database_url_needs_a_hub_data_directory_and_a_hub_schema(
        db_dsn, pg_server, nowhere):
    data = nowhere / "hub"

    async def export(dsn: str) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(mycelium, nowhere, "mirror", "export", "--database-url", dsn,
                                       "--data-dir", str(data))

    missing = await export(db_dsn)
    assert missing.returncode == 1 and missing.stderr.startswith(f"no hub data directory at {data}\n")
    assert not data.exists()
    data.mkdir()
    done = await export(db_dsn)
    assert done.returncode == 0 and f"mirror rebuilt in {data / 'rooms'}" in done.stdout, done.stderr
    bare = await pg_server.create_database(template="template0")  # a database the hub never migrated
    try:
        refused = await export(pg_server.dsn(bare))
    finally:
        await pg_server.drop_database(bare)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "no hub schema" in refused.stderr and "mycelium db upgrade" in refused.stderr


@pytest.mark.parametrize("args", [("db", "current"), ("db", "upgrade"), ("mirror", "export")])
def test_a_database_url_that_does_not_answer_is_a_one_line_error(nowhere, args):
    (nowhere / ".mycelium").mkdir()
    done = mycelium(nowhere, *args, "--database-url", "postgresql://ana:secret@127.0.0.1:9/hub")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "secret" not in done.stderr


def start_hub(cwd: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = open(cwd.parent / "hub.log", "w")  # noqa: SIM115 - the hub's whole life
    proc = subprocess.Popen([sys.executable, "-m", "mycelium.cli.main", "up", "--port", str(port)], cwd=cwd,
                            env=plain_env(), stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, (cwd.parent / "hub.log").read_text()
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise TimeoutError((cwd.parent / "hub.log").read_text())


def test_up_makes_the_data_directory_and_every_command_below_finds_it(tmp_path):
    project = tmp_path / "project"
    deeper = project / "src" / "deeper"
    deeper.mkdir(parents=True)
    hub, url = start_hub(project)
    try:
        assert httpx.post(url + "/api/rooms", json={"name": "atlas"}).status_code == 201
        assert httpx.post(url + "/api/rooms/atlas/memory", json={"items": [
            {"key": "notes/a", "value": "hello", "created_by": "ana"}]}).status_code == 201
    finally:
        hub.send_signal(signal.SIGTERM)
        assert hub.wait(60) == 0
    data = project / ".mycelium"
    assert (data / "pg" / "PG_VERSION").is_file()

    current = mycelium(deeper, "db", "current")  # found above the working directory, started, stopped
    assert current.returncode == 0, current.stderr
    assert current.stdout.strip() == head_revision()
    shutil.rmtree(data / "rooms", ignore_errors=True)  # the hub's follower wrote it; export writes it again
    export = mycelium(project / "src", "mirror", "export")
    assert export.returncode == 0, export.stderr
    assert (data / "rooms" / "atlas" / "notes" / "a.md").read_text().rstrip().endswith("hello")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    named = mycelium(elsewhere, "db", "current", env=plain_env(MYCELIUM_DATA_DIR=str(data)))
    assert named.returncode == 0 and named.stdout.strip() == head_revision()
    assert tree(elsewhere) == []


# -- the same resolution in-process: the CLI's reader and the hub's settings agree ----------------


def test_the_hub_settings_and_the_cli_resolve_the_same_data_directory(tmp_path, monkeypatch):
    for name in UNSET:
        monkeypatch.delenv(name, raising=False)
    project = tmp_path / "project"
    (project / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(project / "a" / "b")
    assert environment.data_dir().path == Settings().resolved_data_dir() == project / "a" / "b" / ".mycelium"
    (project / ".mycelium").mkdir()
    found = environment.data_dir()
    assert found.path == Settings().resolved_data_dir() == project / ".mycelium"
    assert found.chosen_by == f"the nearest .mycelium folder, found in {project}, above the working directory"
    monkeypatch.setenv("MYCELIUM_DATA_DIR", "~/hub")
    assert environment.data_dir().path == Settings().resolved_data_dir() == Path("~/hub").expanduser().resolve()
    flag = tmp_path / "flag"
    assert environment.data_dir(flag).path == Settings(data_dir=flag).resolved_data_dir() == flag


def test_a_dot_env_file_is_read_the_same_way_by_both(tmp_path, monkeypatch):
    for name in (*UNSET, "MYCELIUM_ROOM", "MYCELIUM_HANDLE", "MYCELIUM_API_URL", "MYCELIUM_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text(
        "# the hub's settings\n"
        "export MYCELIUM_ROOM=atlas   # a comment\n"
        'MYCELIUM_HANDLE="nova \\"the second\\""\n'
        "MYCELIUM_API_URL='http://hub:9000/'\n"
        "MYCELIUM_PORT=9001\n"
        "DATABASE_URL=postgresql://from-env-file/db\n"
        "MYCELIUM_MIRROR=\n"
        "not a setting\n")
    settings = Settings()
    assert environment.room() == settings.room == "atlas"
    assert environment.handle() == settings.handle == 'nova "the second"'
    assert environment.api_url() == "http://hub:9000" and settings.api_url == "http://hub:9000/"
    assert settings.port == 9001 and settings.mirror is True  # an empty value counts as unset
    assert environment.database_url() == settings.database_url == "postgresql://from-env-file/db"
    monkeypatch.setenv("MYCELIUM_ROOM", "beta")  # the environment wins over the file
    monkeypatch.setenv("DATABASE_URL", "postgresql://from-environment/db")
    assert environment.room() == Settings().room == "beta"
    assert environment.database_url() == Settings().database_url == "postgresql://from-environment/db"
    monkeypatch.setenv("MYCELIUM_DATABASE_URL", "postgresql://own-name/db")  # its own name wins
    assert environment.database_url() == Settings().database_url == "postgresql://own-name/db"
