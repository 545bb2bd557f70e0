"""The web app on a busy room: a room page with 1,000 messages and 500 tasks, rendered by a real hub
process, beside the API's JSON for the same data in the same run; and how long a message posted
over the API takes to appear in an open page (headless Chromium following the room's stream).

The room: 500 tasks (a third claimed, a sixth resolved, every fifth depending on the two filed
before it), 1,000 messages (half in the room's channel, half spread over 50 task threads, each of
which also pings the channel). The page shows each board column's first 50 rows and the
timeline's last 200 entries (paged, not everything at once); the
API's side is the board and the timeline as JSON (the three board columns of 100 rows, the last 300
timeline messages and the members). Both are timed back to back on one keep-alive connection, as
are the page's live parts: all of them (what a notice re-reads) and what was said alone
(``?only=talk``, what a message re-reads). The tables are analysed after the seeding (autovacuum's
job on a live database: without statistics the board's view plans badly).

Live: the page posts a message with ``fetch`` to the API and a MutationObserver notes when its text
is in the timeline, both on the page's clock, so the interval covers the POST, the commit, the wake,
the stream's event, the page's re-read of the parts a message changes and the swap.

    python bench/web.py                 # 200 page loads per path, 50 live messages
    python bench/web.py --loads 50 --live 20 --no-write
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import asyncpg
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _db import bench_database
from _report import machine, stamp, table, write_section
from tests.support.processes import HubProcess
from wake import tree_cpu

ROOM = "bench"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def seed(dsn: str, tasks: int, messages: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SELECT * FROM mycelium.create_room($1, NULL, NULL, true, NULL, '{}', 'bench')", ROOM)
        episodes: list[str] = []
        keys: list[str] = []
        for i in range(tasks):
            # every fifth task depends on the two filed before it (what the board says it waits on)
            depends = keys[-2:] if i % 5 == 4 else None
            row = await conn.fetchrow("SELECT key, episode FROM mycelium.create_task($1, $2, 'ana', NULL, $3, NULL, $4)",
                                      ROOM, f"Task number {i} of the bench", f"agent{i % 7}", depends)
            episodes.append(row["episode"])
            keys.append(row["key"])
            if i % 3 == 0:
                await conn.execute("SELECT * FROM mycelium.claim_task($1, $2, $3)", ROOM, row["key"], f"agent{i % 5}")
            if i % 6 == 0:
                await conn.execute("SELECT * FROM mycelium.resolve_task($1, $2, $3)", ROOM, row["key"],
                                   f"agent{i % 5}")
        for i in range(messages):
            episode = None if i % 2 == 0 else episodes[i % 50]
            await conn.execute("SELECT * FROM mycelium.post_message($1, $2, $3, $4)", ROOM, f"agent{i % 9}",
                               f"message {i}: some **markdown** and a [[notes/x]] link", episode)
        await conn.execute("ANALYZE")  # as autovacuum would have by now on a room this size
    finally:
        await conn.close()


def time_loads(client: httpx.Client, paths: list[str], loads: int) -> list[float]:
    for path in paths:  # warm up
        assert client.get(path).status_code == 200, path
    out = []
    for _ in range(loads):
        started = time.perf_counter()
        for path in paths:
            r = client.get(path)
            assert r.status_code == 200
        out.append(time.perf_counter() - started)
    return out


class Timed(NamedTuple):
    seconds: list[float]
    hub_ms: float  # the hub's CPU per load (less at the mercy of other load than the time)
    server_ms: float | None  # the database server's (None on a server of DATABASE_URL)

    @property
    def cpu_ms(self) -> float:
        return self.hub_ms + (self.server_ms or 0.0)


def measure(url: str, loads: int, hub: int, server: int | None) -> tuple[Timed, Timed, Timed, Timed, int]:
    """The page, its live parts (all, and what was said), the API's JSON for the same data, and the
    page's size."""

    def timed(client: httpx.Client, paths: list[str]) -> Timed:
        before = tree_cpu(hub), (tree_cpu(server) if server else 0.0)
        seconds = time_loads(client, paths, loads)
        after = tree_cpu(hub), (tree_cpu(server) if server else 0.0)
        per = [1000 * (a - b) / (loads + 1) for a, b in zip(after, before, strict=True)]
        return Timed(seconds, per[0], per[1] if server else None)

    with httpx.Client(base_url=url, timeout=30) as client:
        page = timed(client, [f"/room/{ROOM}"])
        size = len(client.get(f"/room/{ROOM}").content)
        api_paths = [f"/api/rooms/{ROOM}/tasks?filter={f}&limit=100" for f in ("needs_you", "in_flight", "resolved")]
        api_paths += [f"/api/rooms/{ROOM}/messages?limit=300", f"/api/rooms/{ROOM}/sessions/members"]
        api = timed(client, api_paths)
        parts = timed(client, [f"/room/{ROOM}/parts"])
        talk = timed(client, [f"/room/{ROOM}/parts?only=talk"])
    return page, parts, talk, api, size


LIVE_JS = """async (text) => {
  const list = document.querySelector('[data-part="timeline"]');
  const seen = new Promise((resolve) => {
    const obs = new MutationObserver(() => {
      if (list.textContent.includes(text)) { obs.disconnect(); resolve(performance.now()); }
    });
    obs.observe(list, {subtree: true, childList: true, characterData: true});
  });
  const started = performance.now();
  await fetch('/api/rooms/bench/messages', {method: 'POST', headers: {'Content-Type': 'application/json'},
    body: JSON.stringify({sender_handle: 'agent1', content: text})});
  return (await seen) - started;
}"""


async def reads_alone(dsn: str, rows: int, runs: int = 50) -> dict[str, float]:
    """Where a page's database time goes: the median of its board read (the board's view, every row
    derived to count the columns), the same view read whole, and the timeline's read, each as one
    statement on a connection of its own (the round trip over the local socket included)."""
    from mycelium.db.queries import query

    conn = await asyncpg.connect(dsn)
    try:
        head = await conn.fetchval(query("timeline_head").sql, ROOM)
        statements = {
            "board (web_board)": (query("web_board").sql, (ROOM, rows)),
            "board view, every row": ("SELECT * FROM mycelium.board_rows WHERE room = $1", (ROOM,)),
            "timeline (messages_after, 200)": (query("messages_after").sql, (ROOM, max(0, head - 200), 200)),
        }
        out = {}
        for name, (sql, params) in statements.items():
            await conn.fetch(sql, *params)
            times = []
            for _ in range(runs):
                started = time.perf_counter()
                await conn.fetch(sql, *params)
                times.append(time.perf_counter() - started)
            out[name] = 1000 * statistics.median(times)
        return out
    finally:
        await conn.close()


async def live(url: str, count: int) -> list[float]:
    from playwright.async_api import async_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = await browser.new_page()
        await page.goto(f"{url}/room/{ROOM}")
        await page.wait_for_selector("[data-live-state]:has-text('live')")
        out = []
        for i in range(count):
            out.append(await page.evaluate(LIVE_JS, f"live probe {i} {time.time()}") / 1000)
            await asyncio.sleep(0.05)
        await browser.close()
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--loads", type=int, default=200)
    parser.add_argument("--live", type=int, default=50)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    async with bench_database("mycelium_bench_web") as db:
        await seed(db.dsn, args.tasks, args.messages)
        scratch = Path(tempfile.mkdtemp(prefix="mycelium-bench-web-"))
        hub = HubProcess(data_dir=scratch / "hub", database_url=db.dsn, extra=["--no-mirror", "--no-workers"])
        try:
            hub.wait_ready()
            page, parts, talk, api, size = await asyncio.to_thread(measure, hub.url, args.loads, hub.proc.pid,
                                                                   db.postmaster)
            arrivals = await live(hub.url, args.live)
            alone = await reads_alone(db.dsn, 50)
        finally:
            hub.stop()
            shutil.rmtree(scratch, ignore_errors=True)

    def row(name: str, values: list[float], cpu: Timed | None, note: str) -> list[object]:
        return [name, f"{1000 * statistics.median(values):.1f}", f"{1000 * pct(values, 0.95):.1f}",
                "" if cpu is None else f"{len(values) / sum(values):.0f}",
                "" if cpu is None else f"{cpu.hub_ms:.1f}",
                "" if cpu is None or cpu.server_ms is None else f"{cpu.server_ms:.1f}", note]

    rows = [
        row("room page `/room/<name>` (HTML)", page.seconds, page, f"one request, {size / 1024:.0f} KiB"),
        row("its live parts `/room/<name>/parts` (HTML)", parts.seconds, parts,
            "board, timeline, members: what a notice re-reads"),
        row("what was said `/room/<name>/parts?only=talk` (HTML)", talk.seconds, talk,
            "the timeline alone: what a message re-reads"),
        row("the API's JSON for the same data", api.seconds, api,
            "5 requests: 3 board columns, 300 messages, members"),
        row("a message posted over the API, in an open page", arrivals, None,
            "POST → commit → stream → `only=talk` re-read → swap"),
    ]
    text = table(["what", "median ms", "p95 ms", "loads/s", "hub CPU ms", "server CPU ms", "note"], rows)
    where = table(["one statement", "median ms"], [[name, f"{ms:.1f}"] for name, ms in alone.items()])
    load = os.getloadavg()[0]
    print(text, where, sep="\n\n")
    if not args.no_write:
        write_section("web", f"""## The web app (bench/web.py)

A room with {args.tasks} tasks and {args.messages} messages, one hub process (`--no-workers`), {args.loads}
loads per path back to back on one keep-alive connection; {args.live} live messages in headless Chromium.
{machine()}; load average {load:.1f} during the run (other work on the machine); {stamp()}.

{text}

CPU is per load (a load of the API's line is its 5 requests); loads/s is one client's, back to back.
The goals: a page in ≤ 50 ms p95 (here {1000 * pct(page.seconds, 0.95):.0f} ms) and a live message in ≤ 200 ms
p95 (here {1000 * pct(arrivals, 0.95):.0f} ms). The page's CPU, the hub's and the database server's together, is
{page.cpu_ms / api.cpu_ms:.0%} of what the API's JSON for the same data costs.

Where the page's database time goes, each read alone (on the same loaded machine):

{where}

Of the page's CPU, {page.hub_ms:.0f} ms is the hub's (the templates, escaping every value an agent
wrote, and the answers' models) and {page.server_ms or 0:.0f} ms the database server's. The board's read
derives every row's lease and what it waits on (each column is counted, so every row of the room),
planned as one read; the page's other reads take a few milliseconds together. A message re-reads
what was said alone (`only=talk`, {talk.cpu_ms:.0f} ms of CPU against {parts.cpu_ms:.0f} for every part); a notice,
which may move the board, re-reads every part. On a loaded machine the times follow the load; the
CPU per load is the steadier measure.""")


if __name__ == "__main__":
    asyncio.run(main())
