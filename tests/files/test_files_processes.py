"""Files with real processes: 100 MB through `mycelium file put` and back, byte for byte, a range
with `file get --range`, a chunked body over the limit refused as it arrives, and a hub killed with
-9 in the middle of an upload leaving no row and no block."""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
import time

import asyncpg
import httpx
import pytest

from tests.support.cli import mycelium

pytestmark = pytest.mark.slow


async def counts(dsn: str) -> tuple[int, int]:
    conn = await asyncpg.connect(dsn)
    try:
        return (await conn.fetchval("SELECT count(*) FROM mycelium.files"),
                await conn.fetchval("SELECT count(*) FROM mycelium.file_blocks"))
    finally:
        await conn.close()


def test_a_hundred_megabytes_go_up_and_come_back_and_a_range_reads_its_part(hub_processes, tmp_path, db_dsn):
    hub = hub_processes(env={"MYCELIUM_SLIM": "off"})
    env = {"MYCELIUM_API_URL": hub.url, "MYCELIUM_ROOM": "lab", "MYCELIUM_HANDLE": "ana"}
    assert httpx.post(hub.url + "/api/rooms", json={"name": "lab"}).status_code == 201
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        for _ in range(100):
            f.write(os.urandom(1 << 20))
    digest = hashlib.sha256(big.read_bytes()).hexdigest()
    put = mycelium("file", "put", str(big), "--name", "data/big.bin", env=env, timeout=300)
    assert put.returncode == 0, put.stderr
    assert put.stdout.strip() == f"stored data/big.bin in lab: 100.0 MiB, application/octet-stream, sha256 {digest}"
    back = tmp_path / "back.bin"
    got = mycelium("file", "get", "data/big.bin", "-o", str(back), env=env, timeout=300)
    assert got.returncode == 0, got.stderr
    assert back.stat().st_size == 100 << 20 and hashlib.sha256(back.read_bytes()).hexdigest() == digest
    part = tmp_path / "part.bin"
    ranged = mycelium("file", "get", "data/big.bin", "--range", "1048570-1048585", "-o", str(part), env=env)
    assert ranged.returncode == 0 and part.read_bytes() == big.read_bytes()[1048570:1048586]
    listed = mycelium("file", "ls", env=env)
    assert listed.stdout.startswith("data/big.bin\t100.0 MiB\tapplication/octet-stream\t" + digest[:12])
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert mycelium("file", "put", str(empty), env=env).returncode == 0
    assert mycelium("file", "get", "empty", env=env).stdout == ""
    bad = mycelium("file", "put", str(empty), "--name", "../escape", env=env)
    assert bad.returncode == 1 and "bad_file_name" in bad.stderr and "Traceback" not in bad.stderr
    missing = mycelium("file", "get", "nothing", env=env)
    assert missing.returncode == 1 and "file_not_found" in missing.stderr
    assert mycelium("file", "rm", "data/big.bin", env=env).stdout.startswith("removed data/big.bin (100.0 MiB)")
    assert asyncio.run(counts(db_dsn)) == (1, 0)  # the empty one (0 bytes: no block)


def test_a_chunked_body_over_the_limit_is_refused_as_it_arrives(hub_processes, db_dsn):
    hub = hub_processes(env={"MYCELIUM_SLIM": "off"})
    assert httpx.post(hub.url + "/api/rooms", json={"name": "lab"}).status_code == 201
    assert httpx.put(hub.url + "/api/config/files.max_bytes", json={"value": 1_000_000}).status_code == 200
    before = asyncio.run(counts(db_dsn))

    def body():
        for _ in range(40):
            yield b"x" * 65536

    r = httpx.post(hub.url + "/api/rooms/lab/files", params={"name": "big", "created_by": "ana"}, content=body(),
                   timeout=60)
    assert r.status_code == 413 and r.json()["error"] == "file_too_large", r.text
    assert asyncio.run(counts(db_dsn)) == before


def test_a_hub_killed_mid_upload_leaves_no_file_and_no_object(hub_processes, db_dsn):
    hub = hub_processes(env={"MYCELIUM_SLIM": "off"})
    assert httpx.post(hub.url + "/api/rooms", json={"name": "lab"}).status_code == 201
    before = asyncio.run(counts(db_dsn))
    sent = threading.Event()

    def slow():
        for n in range(200):
            if n == 8:
                sent.set()
            yield os.urandom(1 << 20)
            time.sleep(0.05)

    outcome: list[object] = []

    def upload():
        try:
            outcome.append(httpx.post(hub.url + "/api/rooms/lab/files", params={"name": "cut", "created_by": "ana"},
                                      content=slow(), timeout=60))
        except httpx.HTTPError as exc:
            outcome.append(exc)

    t = threading.Thread(target=upload)
    t.start()
    assert sent.wait(30)
    time.sleep(0.3)  # blocks written, uncommitted

    async def writing() -> bool:  # the upload's transaction has written (it holds a transaction id)
        conn = await asyncpg.connect(db_dsn)
        try:
            return bool(await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_xid IS NOT NULL"
                " AND query LIKE '%append_file_bytes%'"))
        finally:
            await conn.close()
    assert asyncio.run(writing())
    hub.proc.kill()
    hub.proc.wait(timeout=10)
    t.join(30)
    assert outcome and isinstance(outcome[0], httpx.HTTPError)

    async def settled():
        for _ in range(100):
            got = await counts(db_dsn)
            if got == before:
                return got
            await asyncio.sleep(0.1)  # (the server sees the dead connection and rolls it back)
        return await counts(db_dsn)
    assert asyncio.run(settled()) == before
