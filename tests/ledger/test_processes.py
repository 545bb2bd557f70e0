"""Real processes: two workers redispatching one call, workers killed with SIGKILL at each point of a
call, a lease lapsing under a live worker. The effects file counts what really happened."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def spawn(mode: str, dsn: str, tmp: Path, name: str, *extra: str) -> tuple[subprocess.Popen, Path]:
    ready = tmp / f"{name}.ready"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.ledger.workers",
            mode,
            "--dsn",
            dsn,
            "--effects",
            str(tmp / "effects"),
            "--ready",
            str(ready),
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, ready


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"worker exited early: {proc.stderr.read() if proc.stderr else ''}")
        if time.monotonic() > deadline:
            raise AssertionError("worker never got ready")
        time.sleep(0.02)


def finish(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def effects(tmp: Path) -> int:
    path = tmp / "effects"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_two_processes_redispatching_one_call_run_its_side_effect_once(db_dsn, tmp_path):
    a, ready = spawn("slow", db_dsn, tmp_path, "a", "--sleep", "1.0")
    wait_for(ready, a)
    b, _ = spawn("slow", db_dsn, tmp_path, "b", "--sleep", "1.0")
    first, second = finish(a), finish(b)
    assert first["result"]["pid"] == a.pid
    assert second["result"] == first["result"]  # B polled and returned A's result
    assert effects(tmp_path) == 1


@pytest.mark.parametrize(
    ("mode", "expect"),
    [
        ("crash_before", "ALLOW"),
        ("crash_inside", "HARD_BLOCK"),
        ("crash_crossed", "HARD_BLOCK"),
        ("crash_after", "RETURN"),
    ],
)
def test_a_worker_killed_at_each_point_of_a_call_is_resolved_by_what_the_table_says(
    db_dsn, tmp_path, mode, expect
):
    lease = ["--class", "idempotent_mutate", "--lease", "1.0"]
    victim, ready = spawn(mode, db_dsn, tmp_path, "victim", *lease)
    wait_for(ready, victim)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    before = effects(tmp_path)
    redispatch, _ = spawn("slow", db_dsn, tmp_path, "again", *lease)
    out = finish(redispatch)
    if expect == "ALLOW":
        assert before == 0 and out["result"]["pid"] == redispatch.pid  # the lease expired; it ran, once
    elif expect == "HARD_BLOCK":
        boundary = "maybe_crossed" if mode == "crash_inside" else "boundary crossed"
        assert out["error"] == "LedgerHardBlockError" and boundary in out["message"], out
    else:
        assert out["result"]["pid"] == victim.pid  # the stored result, not a second run
    assert effects(tmp_path) == 1


def test_a_lease_lapsing_under_a_live_worker_never_yields_a_second_effect(db_dsn, tmp_path):
    strict = ["--lease", "0.5", "--renew", "0"]
    slow, ready = spawn("late", db_dsn, tmp_path, "slow", *strict, "--sleep", "2.0")
    wait_for(ready, slow)
    time.sleep(0.8)
    peer, _ = spawn("slow", db_dsn, tmp_path, "peer", *strict)
    blocked = finish(peer)
    late = finish(slow)
    assert blocked["error"] == "LedgerHardBlockError"
    assert late["error"] == "LedgerOutcomeAlreadySetError"  # it may not enter the boundary any more
    assert effects(tmp_path) == 0  # nothing ran twice; the row waits for a human

    idem = ["--class", "idempotent_mutate", "--lease", "0.5", "--renew", "0", "--call", "call-2"]
    slow, ready = spawn("late", db_dsn, tmp_path, "slow2", *idem, "--sleep", "2.0")
    wait_for(ready, slow)
    time.sleep(0.8)
    peer, _ = spawn("slow", db_dsn, tmp_path, "peer2", *idem)
    took_over, late = finish(peer), finish(slow)
    assert took_over["result"]["pid"] == peer.pid
    assert late["error"] == "LedgerOutcomeAlreadySetError"
    assert effects(tmp_path) == 1


async def test_a_sync_caller_interrupted_while_its_claim_waits_lets_the_claim_go_instead_of_renewing_it(
    db_dsn, admin_conn, tmp_path
):
    # the claim waits: a person holds the table against inserts
    lock = admin_conn.transaction()
    await lock.start()
    await admin_conn.execute("LOCK TABLE mycelium.transitions IN SHARE ROW EXCLUSIVE MODE")
    worker, ready = spawn(
        "interrupted", db_dsn, tmp_path, "w", "--lease", "1.0", "--renew", "0.1", "--sleep", "3.0"
    )
    try:
        wait_for(ready, worker)
        watcher = await asyncpg.connect(db_dsn)
        try:
            waiting = "SELECT count(*) FROM pg_locks WHERE relation = 'mycelium.transitions'::regclass" \
                " AND NOT granted"
            for _ in range(3000):
                if await watcher.fetchval(waiting):
                    break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError("the worker's claim never waited on the lock")
            os.kill(worker.pid, signal.SIGINT)  # Ctrl-C while the claim is still waiting
            await asyncio.to_thread(wait_for, tmp_path / "interrupted", worker)
        finally:
            await watcher.close()
    finally:
        await lock.rollback()  # the claim now goes through on the worker's store loop
    assert (await asyncio.to_thread(finish, worker)) == {"interrupted": True}
    row = await admin_conn.fetchrow("SELECT terminal_outcome, error, fence FROM mycelium.transitions")
    # let go as a failure before the body ran: not a lease renewed for as long as the process lives
    assert row["terminal_outcome"] == "FAILED_BEFORE_EFFECT" and row["fence"] == 1
    assert row["error"].startswith("KeyboardInterrupt")
    assert effects(tmp_path) == 0
