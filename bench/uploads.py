"""Files: an upload over HTTP into the hub (``POST /api/rooms/{room}/files``, the body streamed into
the database's 1 MiB blocks in one transaction), the whole file downloaded again, and 1 MiB ranges of it
read with ``Range: bytes=A-B``, beside, in the same run, the limits on the same disk: a plain copy of
the same file (``shutil.copyfile``, the destination fsynced, and again without the fsync) and a plain
``seek`` + ``read`` of the same ranges.

The file is random bytes (``--mib``, 100 MiB by default), written to a temporary folder beside the
embedded server's data (one file system; with ``DATABASE_URL`` the server's disk may be another).
The client is ``http.client`` as the CLI's (``mycelium file put|get``): the upload streams the file
from disk with its ``Content-Length`` (1 MiB blocks), the download is read into one 1 MiB buffer and
written to a file on the same disk (not fsynced, as the CLI's) and its SHA-256 checked, the ranges
are read on one keep-alive connection, one at a time, and their bytes checked against the file.

The database's own limit is measured beside them, in raw SQL from one connection of this process:
the same 1 MiB blocks inserted into a bare table of the same shape (no hub, no triggers, no checks)
in one transaction, and the same ranges read from it with ``substring``; and, for the record, the
same bytes written as a large object (``lo_put``, how files were stored before). CPU
per MiB is the hub's process tree and PostgreSQL's (the postmaster's tree: backends, WAL writer,
checkpointer) for those rows, plus this process's; this process's own for the plain rows
(``copyfile`` is ``sendfile`` in the kernel: its system time is this process's). One hub process
(``mycelium up``), PostgreSQL (embedded unless ``DATABASE_URL``) and this client share the machine's
cores. Each run uploads under a new name (no replace); a row that writes starts after a ``CHECKPOINT``
and a ``sync()`` (it pays for its own writes, not for the previous row's); the runs are interleaved
(every row once per run), and the figures are medians over the runs.

    python bench/uploads.py                 # 100 MiB, 64 ranges of 1 MiB, 3 copies per run, 3 runs
    python bench/uploads.py --mib 20 --runs 1 --no-write
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import http.client
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _db import bench_database
from _report import machine, stamp, table, write_section
from tests.support.processes import HubProcess
from wake import pct, tree_cpu

ROOM = "bench"
MIB = 1 << 20
BLOCK = MIB


def self_cpu() -> float:
    return time.process_time()  # user + system of this process (its threads included)


class Cpu:
    """CPU seconds of the hub's tree, PostgreSQL's tree (when embedded) and this process, read around
    a measured stretch."""

    def __init__(self, hub: int, postmaster: int | None) -> None:
        self.hub, self.postmaster = hub, postmaster

    def start(self) -> tuple[float, float, float]:
        return (tree_cpu(self.hub), tree_cpu(self.postmaster) if self.postmaster else 0.0, self_cpu())

    def stop(self) -> tuple[float, float, float]:  # this process's first: the scans of /proc are not its work
        mine = self_cpu()
        return (tree_cpu(self.hub), tree_cpu(self.postmaster) if self.postmaster else 0.0, mine)


def used(before: tuple[float, ...], after: tuple[float, ...]) -> list[float]:
    return [b - a for a, b in zip(before, after, strict=True)]


def random_file(path: Path, mib: int) -> str:
    digest = hashlib.sha256()
    with open(path, "wb") as out:
        for _ in range(mib):
            block = os.urandom(MIB)
            digest.update(block)
            out.write(block)
        out.flush()
        os.fsync(out.fileno())
    return digest.hexdigest()


def blocks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            yield block


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    for block in blocks(path):
        digest.update(block)
    return digest.hexdigest()


def connect(port: int) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", port, timeout=600, blocksize=BLOCK)


def request_json(port: int, method: str, path: str, body: object = None) -> tuple[int, Any]:
    conn = connect(port)
    try:
        payload = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=payload, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data else None
    finally:
        conn.close()


# -- the hub's rows --------------------------------------------------------------------------------

def upload_row(port: int, cpu: Cpu, source: Path, name: str, sha: str) -> dict[str, Any]:
    size = source.stat().st_size
    target = f"/api/rooms/{ROOM}/files?" + urlencode({"name": name, "created_by": "bench"})
    conn = connect(port)
    try:
        with open(source, "rb") as body:
            c0 = cpu.start()
            t0 = time.perf_counter()
            conn.request("POST", target, body=body, headers={
                "Content-Type": "application/octet-stream", "Content-Length": str(size)})
            response = conn.getresponse()
            data = response.read()
            seconds = time.perf_counter() - t0
            c1 = cpu.stop()
    finally:
        conn.close()
    assert response.status == 201, (response.status, data[:500])
    made = json.loads(data)
    assert made["size"] == size and made["sha256"] == sha, made
    return {"seconds": seconds, "mib_s": size / MIB / seconds, "cpu": [1000 * u / (size / MIB) for u in used(c0, c1)]}


def download_row(port: int, cpu: Cpu, name: str, out: Path, sha: str) -> dict[str, Any]:
    conn = connect(port)
    try:
        c0 = cpu.start()
        t0 = time.perf_counter()
        conn.request("GET", f"/api/rooms/{ROOM}/files/{name}")
        response = conn.getresponse()
        assert response.status == 200, (response.status, response.read()[:500])
        buffer = memoryview(bytearray(BLOCK))  # one buffer, read into and written from
        with open(out, "wb") as f:
            while n := response.readinto(buffer):
                f.write(buffer[:n])
        seconds = time.perf_counter() - t0
        c1 = cpu.stop()
    finally:
        conn.close()
    size = out.stat().st_size
    assert sha256_of(out) == sha, "the download's SHA-256 differs from the upload's"
    out.unlink()
    return {"seconds": seconds, "mib_s": size / MIB / seconds, "cpu": [1000 * u / (size / MIB) for u in used(c0, c1)]}


def ranged_row(port: int, cpu: Cpu, name: str, source: Path, offsets: list[int], length: int) -> dict[str, Any]:
    expected = []
    with open(source, "rb") as f:
        for a in offsets:
            f.seek(a)
            expected.append(f.read(length))
    times: list[float] = []
    received = bytearray(length)
    buffer = memoryview(received)
    conn = connect(port)
    try:
        c0 = cpu.start()
        t0 = time.perf_counter()
        for a, want in zip(offsets, expected, strict=True):
            r0 = time.perf_counter()
            conn.request("GET", f"/api/rooms/{ROOM}/files/{name}", headers={"Range": f"bytes={a}-{a + length - 1}"})
            response = conn.getresponse()
            assert response.status == 206, (response.status, response.read()[:500])
            got = 0
            while got < length and (n := response.readinto(buffer[got:])):
                got += n
            assert got == length and response.read() == b""
            times.append((time.perf_counter() - r0) * 1000)
            assert received == want, f"the range at {a} differs from the file"
        seconds = time.perf_counter() - t0
        c1 = cpu.stop()
    finally:
        conn.close()
    mib = len(offsets) * length / MIB
    return {"seconds": seconds, "mib_s": mib / seconds, "p50": pct(times, 0.5), "p99": pct(times, 0.99),
            "cpu": [1000 * u / mib for u in used(c0, c1)]}


# -- the database's own limit: the same blocks in raw SQL, no hub -----------------------------------

RAW_TABLE = """CREATE TABLE IF NOT EXISTS bench_blocks (
  data bigint NOT NULL, start bigint NOT NULL, bytes bytea STORAGE EXTERNAL NOT NULL, PRIMARY KEY (data, start))"""


async def raw_put_row(conn: asyncpg.Connection, cpu: Cpu, source: Path, data: int) -> dict[str, Any]:
    """The file's 1 MiB blocks inserted into the bare table, one transaction, committed (left for
    :func:`raw_get_row`)."""
    c0 = cpu.start()
    t0 = time.perf_counter()
    async with conn.transaction():
        size = 0
        for block in blocks(source):  # (read from the page cache, as the upload's client reads it)
            await conn.execute("INSERT INTO bench_blocks VALUES ($1, $2, $3)", data, size, block)
            size += len(block)
    seconds = time.perf_counter() - t0
    c1 = cpu.stop()
    return {"seconds": seconds, "mib_s": size / MIB / seconds, "cpu": [1000 * u / (size / MIB) for u in used(c0, c1)]}


async def raw_lo_row(conn: asyncpg.Connection, cpu: Cpu, source: Path) -> dict[str, Any]:
    """``lo_create`` + ``lo_put`` of the same 1 MiB blocks, one transaction, committed, then unlinked."""
    c0 = cpu.start()
    t0 = time.perf_counter()
    async with conn.transaction():
        oid = await conn.fetchval("SELECT lo_create(0)")
        size = 0
        for block in blocks(source):
            await conn.execute("SELECT lo_put($1, $2, $3)", oid, size, block)
            size += len(block)
    seconds = time.perf_counter() - t0
    c1 = cpu.stop()
    await conn.execute("SELECT lo_unlink($1)", oid)
    return {"seconds": seconds, "mib_s": size / MIB / seconds, "cpu": [1000 * u / (size / MIB) for u in used(c0, c1)]}


async def raw_get_row(conn: asyncpg.Connection, cpu: Cpu, data: int, offsets: list[int], length: int
                      ) -> dict[str, Any]:
    """The ranges read from the bare table's blocks with ``substring``, one statement each."""
    times: list[float] = []
    c0 = cpu.start()
    t0 = time.perf_counter()
    for a in offsets:
        r0 = time.perf_counter()
        got = await conn.fetchval(
            "SELECT string_agg(substring(bytes FROM (greatest($2 - start, 0) + 1)::integer"
            " FOR (least($2 + $3, start + octet_length(bytes)) - greatest($2, start))::integer), ''::bytea"
            " ORDER BY start) FROM bench_blocks WHERE data = $1 AND start > $2 - 1048576 AND start < $2 + $3",
            data, a, length)
        times.append((time.perf_counter() - r0) * 1000)
        assert len(got) == length
    seconds = time.perf_counter() - t0
    c1 = cpu.stop()
    mib = len(offsets) * length / MIB
    return {"seconds": seconds, "mib_s": mib / seconds, "p50": pct(times, 0.5), "p99": pct(times, 0.99),
            "cpu": [1000 * u / mib for u in used(c0, c1)]}


# -- the limits on the same disk --------------------------------------------------------------------

def copy_row(source: Path, dest: Path, fsync: bool) -> dict[str, Any]:
    size = source.stat().st_size
    c0 = self_cpu()
    t0 = time.perf_counter()
    shutil.copyfile(source, dest)
    if fsync:
        fd = os.open(dest, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    seconds = time.perf_counter() - t0
    c = self_cpu() - c0
    dest.unlink()
    return {"seconds": seconds, "mib_s": size / MIB / seconds, "cpu": [0.0, 0.0, 1000 * c / (size / MIB)]}


def median_copy(copies: list[dict[str, Any]]) -> dict[str, Any]:
    """One run's figure of a copy row: the median of its copies (each copy's rate kept)."""
    middle = sorted(copies, key=lambda r: r["mib_s"])[len(copies) // 2]
    return {**middle, "each": [r["mib_s"] for r in copies]}


def read_row(source: Path, offsets: list[int], length: int) -> dict[str, Any]:
    times: list[float] = []
    with open(source, "rb") as f:
        c0 = self_cpu()
        t0 = time.perf_counter()
        for a in offsets:
            r0 = time.perf_counter()
            f.seek(a)
            data = f.read(length)
            times.append((time.perf_counter() - r0) * 1000)
            assert len(data) == length
        seconds = time.perf_counter() - t0
        c = self_cpu() - c0
    mib = len(offsets) * length / MIB
    return {"seconds": seconds, "mib_s": mib / seconds, "p50": pct(times, 0.5), "p99": pct(times, 0.99),
            "cpu": [0.0, 0.0, 1000 * c / mib]}


async def settle(conn: asyncpg.Connection) -> None:
    """Before a row that writes: the previous rows' writes on disk (a checkpoint, then ``sync``), so
    that no row pays for another's writeback."""
    with contextlib.suppress(asyncpg.PostgresError):  # (a server at DATABASE_URL may not let this role)
        await conn.execute("CHECKPOINT")
    os.sync()


async def measure(args: argparse.Namespace) -> tuple[dict[str, list[dict[str, Any]]], list[float]]:
    rows: dict[str, list[dict[str, Any]]] = {k: [] for k in ("upload", "raw_put", "raw_lo", "download", "ranged",
                                                             "raw_get", "copy_fsync", "copy", "read")}
    loads = [os.getloadavg()[0]]
    async with bench_database("bench_uploads") as db:
        folder = Path(tempfile.mkdtemp(prefix="mycelium-bench-uploads-"))  # beside the embedded server's data
        try:
            source = folder / "source.bin"
            sha = random_file(source, args.mib)
            size = source.stat().st_size
            length = args.range_kib * 1024
            hub = HubProcess(data_dir=folder / "hub", database_url=db.dsn, extra=["--no-mirror"],
                             env={"MYCELIUM_SLIM": "off", "MYCELIUM_MIGRATE_ON_START": "false"})
            try:
                hub.wait_ready()
                status, body = request_json(hub.port, "POST", "/api/rooms", {"name": ROOM})
                assert status == 201, (status, body)
                cpu = Cpu(hub.proc.pid, db.postmaster)
                conn = await asyncpg.connect(db.dsn)
                warm = folder / "warm.bin"  # warm up: the pool's connections, the code paths
                warm_sha = random_file(warm, 2)
                upload_row(hub.port, cpu, warm, "warm", warm_sha)
                download_row(hub.port, cpu, "warm", folder / "warm.out", warm_sha)
                ranged_row(hub.port, cpu, "warm", warm, [0, MIB // 2], min(length, MIB))
                await conn.execute(RAW_TABLE)
                await raw_put_row(conn, cpu, warm, -1)
                await raw_get_row(conn, cpu, -1, [0, MIB // 2], min(length, MIB))
                await raw_lo_row(conn, cpu, warm)
                await conn.execute("DELETE FROM bench_blocks")
                rng = random.Random(args.seed)
                for run in range(args.runs):
                    name = f"blob-{run}"
                    offsets = [rng.randrange(0, size - length + 1) for _ in range(args.ranges)]
                    await settle(conn)
                    rows["upload"].append(upload_row(hub.port, cpu, source, name, sha))
                    await settle(conn)
                    rows["download"].append(download_row(hub.port, cpu, name, folder / "download.bin", sha))
                    rows["ranged"].append(ranged_row(hub.port, cpu, name, source, offsets, length))
                    await settle(conn)
                    rows["raw_put"].append(await raw_put_row(conn, cpu, source, run))
                    rows["raw_get"].append(await raw_get_row(conn, cpu, run, offsets, length))
                    await conn.execute("DELETE FROM bench_blocks")
                    await settle(conn)
                    rows["raw_lo"].append(await raw_lo_row(conn, cpu, source))
                    for key, fsync in (("copy_fsync", True), ("copy", False)):
                        copies = []
                        for _ in range(args.copies):
                            await settle(conn)
                            copies.append(copy_row(source, folder / "copy.bin", fsync=fsync))
                        rows[key].append(median_copy(copies))
                    rows["read"].append(read_row(source, offsets, length))
                    status, body = request_json(hub.port, "DELETE", f"/api/rooms/{ROOM}/files/{name}")
                    assert status == 200, (status, body)
                    print(f"run {run + 1}/{args.runs}: " + ", ".join(
                        f"{k} {v[-1]['mib_s']:.0f} MiB/s" for k, v in rows.items()), file=sys.stderr)
                await conn.close()
            finally:
                hub.stop()
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    loads.append(os.getloadavg()[0])
    return rows, loads


def report(args: argparse.Namespace, rows: dict[str, list[dict[str, Any]]], loads: list[float]) -> None:
    n, kib = args.ranges, args.range_kib
    size = f"{kib // 1024} MiB" if kib % 1024 == 0 else f"{kib} KiB"
    external = bool(os.environ.get("DATABASE_URL"))
    names = {
        "upload": f"upload: `POST …/files`, {args.mib} MiB streamed from disk -> 201 (committed)",
        "raw_put": f"raw SQL: `INSERT` of the same 1 MiB blocks into a bare table, {args.mib} MiB, one transaction (no hub)",
        "raw_lo": "raw SQL: `lo_create` + `lo_put` of the same blocks, a large object (the former storage; no hub)",
        "download": f"download: `GET …/files/{{name}}`, {args.mib} MiB -> a file on disk (no fsync)",
        "ranged": f"ranged download: {n} × `Range: bytes=A-B` of {size} -> 206, one at a time",
        "raw_get": f"raw SQL: `substring` of the same {n} ranges of {size} from those blocks, one at a time (no hub)",
        "copy_fsync": f"plain copy of the {args.mib} MiB file, the copy fsynced (the limit; median of {args.copies})",
        "copy": f"plain copy of the {args.mib} MiB file, no fsync (median of {args.copies})",
        "read": f"plain `seek` + `read` of the same {n} ranges of {size} (the ranges' limit)",
    }
    m: dict[str, dict[str, Any]] = {}
    out = []
    for key, runs in rows.items():
        mib_s = statistics.median(r["mib_s"] for r in runs)
        parts = [statistics.median(r["cpu"][i] for r in runs) for i in range(3)]
        p50 = statistics.median(r["p50"] for r in runs) if "p50" in runs[0] else None
        m[key] = {"mib_s": mib_s, "cpu": parts, "p50": p50}
        pg = "n/a" if external else f"{parts[1]:.2f}"
        if key in ("upload", "download", "ranged"):
            cpu_text = f"{parts[0] + parts[1]:.2f} ({parts[0]:.2f} / {pg}) + {parts[2]:.2f}"
        elif key.startswith("raw_"):
            cpu_text = f"{pg} (– / {pg}) + {parts[2]:.2f}"
        else:
            cpu_text = f"{parts[2]:.2f}"
        out.append([names[key], f"{mib_s:,.0f}", " / ".join(f"{r['mib_s']:,.0f}" for r in runs), cpu_text,
                    f"{p50:.2f}" if p50 is not None else "–"])

    def rate(key: str) -> float:
        return float(m[key]["mib_s"])

    limit = rate("copy_fsync")
    up, down, ranged = rate("upload") / limit, rate("download") / limit, rate("ranged") / limit
    met = up >= 0.5 and ranged >= 0.5
    missed = [w for w, x in (("upload", up), ("ranged download", ranged)) if x < 0.5]
    copies = [x for r in rows["copy_fsync"] for x in r["each"]]
    fastest = max(copies)
    where = "at DATABASE_URL" if external else "embedded, fsync on, shared_buffers 256MB"
    server_ms = m["upload"]["cpu"][0] + m["upload"]["cpu"][1]
    wall_ms = 1000 / rate("upload")
    turns = "" if external or server_ms < 0.75 * wall_ms else f"""
The upload's server CPU ({server_ms:.1f} ms per MiB: hub {m["upload"]["cpu"][0]:.1f}, PostgreSQL
{m["upload"]["cpu"][1]:.1f}) is {server_ms / wall_ms:.0%} of its wall time per MiB ({wall_ms:.1f} ms), on {os.cpu_count()} cores
(the handler reads the next 1 MiB block while the last one is inserted): it is bound by CPU, most
of it PostgreSQL's writing of the blocks (each into the WAL and into its TOAST chunks)."""
    text = f"""## Files: uploads and ranged downloads (`bench/uploads.py`) — {stamp()}

`python bench/uploads.py --mib {args.mib} --ranges {n} --copies {args.copies} --runs {args.runs}` ({machine()}).
One hub process (`mycelium up`), PostgreSQL ({where}) and the client (`http.client`, as
`mycelium file`) share the cores; the file is {args.mib} MiB of random bytes in a temporary folder on the
file system of the server's data. Each run uploads it under a new name, downloads it whole (its
SHA-256 checked), reads {n} random ranges of {size} of it (their bytes checked), does the same
block writes and reads in raw SQL from one connection (and the same bytes as a large object), then copies the file with
`shutil.copyfile` {args.copies} times with the copy fsynced and {args.copies} times without (a run's figure: the
median of its copies), and reads the same ranges with `seek` + `read`. The source file is in the page
cache for every row; each row that writes starts after a `CHECKPOINT` and a `sync()`, so it does not
pay for another's writeback. 1-minute load average: {loads[0]:.1f} at the start, {loads[1]:.1f} at the end (on
{os.cpu_count()} cores). Medians over the runs.

{table(["path", "MiB/s (median)", "MiB/s per run",
        "CPU ms per MiB: server (hub / PostgreSQL) + client; plain rows: this process", "p50 ms per range"], out)}

Against the fsynced plain copy ({limit:,.0f} MiB/s): the upload runs at **{up:.0%}**, the whole download
at {down:.0%} ({rate("download") / rate("copy"):.0%} of the copy without fsync; the download is not fsynced either), the
ranged download at **{ranged:.0%}** ({rate("ranged") / rate("read"):.0%} of the plain ranged read). Target: upload and
ranged download at least 50% of a plain copy on the same disk:
{'**met**' if met else '**NOT met** (' + ', '.join(missed) + ')'}. The {len(copies)} fsynced copies ran at
{min(copies):,.0f} to {fastest:,.0f} MiB/s; against the fastest the upload is at {rate("upload") / fastest:.0%} and the ranged
download at {rate("ranged") / fastest:.0%}.

The database's own path, without the hub, is the nearer limit: the raw block inserts run at
{rate("raw_put") / limit:.0%} of the fsynced copy and the hub's upload at {rate("upload") / rate("raw_put"):.0%} of them; the raw
`substring` reads of the ranges at {rate("raw_get") / limit:.0%} of the copy and the hub's ranged download at
{rate("ranged") / rate("raw_get"):.0%} of them. The same bytes as a large object (`lo_put`) ran at {rate("raw_lo"):,.0f} MiB/s, the
blocks at {rate("raw_put") / rate("raw_lo"):.1f}x that (a large object is stored in 2 KiB rows that PostgreSQL tries to compress
one by one; the blocks are stored uncompressed). The upload's commit makes it as durable as the
fsynced copy, but PostgreSQL writes the bytes twice (to the WAL, fsynced at the commit, and to the
table's TOAST chunks, whose pages are written back later, partly outside the time measured).{turns}
"""
    print(text)
    if not args.no_write:
        write_section("uploads", text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=100, help="the file's size in MiB (default 100)")
    parser.add_argument("--ranges", type=int, default=64, help="ranges read per run (default 64)")
    parser.add_argument("--range-kib", type=int, default=1024, help="each range's size in KiB (default 1024)")
    parser.add_argument("--copies", type=int, default=3, help="plain copies per run and row (default 3)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args()
    rows, loads = asyncio.run(measure(args))
    report(args, rows, loads)


if __name__ == "__main__":
    main()
