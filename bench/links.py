"""Links parsed by the database: what the trigger costs a write, and how fast the link views answer.

Side by side in one run:
  * writes through ``mycelium.write_memory`` of the same linked bodies with the link trigger on and
    off (off = the write path without link parsing: the floor the trigger adds to), and of plain
    prose with the trigger on (the fast path for bodies with no link syntax);
  * ``memory_links_of`` and ``expand_memory`` latency next to a bare ``SELECT 1`` round trip (the
    floor of any call), and ``link_graph`` / ``link_integrity`` over the whole room.

Bodies are generated markdown (headings, prose, a fenced block, inline code) with wikilinks, URIs,
anchored links, a transclusion and frontmatter relations; about one target in ten does not exist.

    python bench/links.py                 # 5,000 memories per variant
    python bench/links.py --n 1000 --calls 200
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _db import bench_database
from _report import machine, stamp, table, write_section
from mycelium.db.pool import setup_connection

WORDS = ["billing", "onboarding", "search", "release", "payroll", "pipeline", "gateway", "budget", "outage",
         "audit", "vendor", "cache", "launch", "freeze", "contract", "review", "owner", "rollout", "metric"]
LINK_TRIGGERS = ("t80_memories_derive_links_on_insert", "t85_memories_derive_links_on_update")


def prose(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def linked_body(rng: random.Random, n: int, links: int) -> str:
    def key() -> str:
        return f"notes/{rng.randrange(int(n * 1.1))}"  # ~1 in 10 targets missing

    parts = [f"# Note\n{prose(rng, 30)}", f"## Trade Offs\n{prose(rng, 40)} see [[{key()}#trade-offs|why]]"]
    kinds = [lambda: f"[[{key()}]]", lambda: f"myc://{key()}.", lambda: f"[ref](myc://{key()})",
             lambda: f"![[{key()}#summary]]"]
    for i in range(links - 1):
        parts.append(f"{prose(rng, 15)} {kinds[i % len(kinds)]()} {prose(rng, 10)}")
    parts.append("```\n[[not-a-link]] myc://not/either\n```\nUse `[[x]]` to link.")
    parts.append(f"## Summary\n{prose(rng, 25)}")
    return "\n\n".join(parts)


def plain_body(rng: random.Random) -> str:
    return "\n\n".join(prose(rng, 40) for _ in range(6))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


async def load(conn: asyncpg.Connection, room: str, bodies: list[str], metas: list[dict], batch: int) -> float:
    """Write every body through the verb in transactions of ``batch``; memories per second."""
    start = time.perf_counter()
    for lo in range(0, len(bodies), batch):
        rows = [(room, f"notes/{i}", {"text": bodies[i]}, "bench", metas[i])
                for i in range(lo, min(lo + batch, len(bodies)))]
        async with conn.transaction():
            await conn.executemany(
                "SELECT 1 FROM mycelium.write_memory($1, $2, $3, $4, p_meta => $5, p_embed => false)", rows)
    return len(bodies) / (time.perf_counter() - start)


async def timed(conn: asyncpg.Connection, sql: str, *args: object) -> float:
    t = time.perf_counter()
    await conn.fetchval(sql, *args)
    return (time.perf_counter() - t) * 1000


async def run(args: argparse.Namespace) -> None:
    rng = random.Random(7)
    load_before = os.getloadavg()[0]
    n = args.n
    linked = [linked_body(rng, n, args.links) for _ in range(n)]
    metas = [{"expandable": True, "relates-to": [f"notes/{rng.randrange(n)}"]} for _ in range(n)]
    plain = [plain_body(rng) for _ in range(n)]
    no_meta = [{} for _ in range(n)]

    async with bench_database("bench_links") as (dsn, _):
        conn = await asyncpg.connect(dsn)
        await setup_connection(conn)
        rates: dict[str, list[float]] = {"on": [], "off": [], "plain_on": [], "plain_off": []}
        try:
            for r in range(args.repeats):
                for variant, bodies, meta, trigger in (("on", linked, metas, True), ("off", linked, metas, False),
                                                       ("plain_on", plain, no_meta, True),
                                                       ("plain_off", plain, no_meta, False)):
                    room = f"{variant}-{r}"
                    await conn.execute("SELECT mycelium.create_room($1)", room)
                    action = "ENABLE" if trigger else "DISABLE"
                    for name in LINK_TRIGGERS:
                        await conn.execute(f"ALTER TABLE mycelium.memories {action} TRIGGER {name}")
                    rates[variant].append(await load(conn, room, bodies, meta, args.batch))
            for name in LINK_TRIGGERS:
                await conn.execute(f"ALTER TABLE mycelium.memories ENABLE TRIGGER {name}")
            await conn.execute("VACUUM ANALYZE")

            room = "on-0"
            links_per_memory = await conn.fetchval(
                "SELECT count(*)::float / $2 FROM mycelium.memory_links WHERE room = $1", room, n)
            keys = [f"notes/{rng.randrange(n)}" for _ in range(args.calls)]
            lat: dict[str, list[float]] = {"select1": [], "links_of": [], "expand": []}
            for i, key in enumerate(keys):
                s1 = await timed(conn, "SELECT 1")
                lo = await timed(conn, "SELECT mycelium.memory_links_of($1, $2)", room, key)
                ex = await timed(conn, "SELECT mycelium.expand_memory($1, $2)", room, key)
                if i >= 10:  # warm-up
                    lat["select1"].append(s1)
                    lat["links_of"].append(lo)
                    lat["expand"].append(ex)
            whole: dict[str, list[float]] = {"graph": [], "integrity": []}
            for _ in range(args.whole_runs):
                whole["graph"].append(await timed(conn, "SELECT mycelium.link_graph($1)::text", room))
                whole["integrity"].append(await timed(conn, "SELECT mycelium.link_integrity($1)::text", room))
        finally:
            await conn.close()

    def rate(variant: str) -> str:
        return f"{statistics.median(rates[variant]):,.0f}"

    def per_write_us(variant: str) -> float:
        return 1e6 / statistics.median(rates[variant])

    overhead_linked = per_write_us("on") - per_write_us("off")
    overhead_plain = per_write_us("plain_on") - per_write_us("plain_off")
    writes = table(
        [f"write path (`mycelium.write_memory`, batches of {args.batch})", "memories/s (median)",
         "µs per write"],
        [
            [f"linked body ({links_per_memory:.1f} links, headings), link trigger on", rate("on"),
             f"{per_write_us('on'):.0f}"],
            ["same bodies, link trigger off (the floor)", rate("off"), f"{per_write_us('off'):.0f}"],
            ["plain prose (no link syntax), link trigger on", rate("plain_on"), f"{per_write_us('plain_on'):.0f}"],
            ["plain prose, link trigger off (the floor)", rate("plain_off"), f"{per_write_us('plain_off'):.0f}"],
        ],
    )
    reads = table(
        ["read (one connection, in SQL)", "p50 ms", "p95 ms"],
        [
            ["`SELECT 1` round trip (the floor)", f"{pct(lat['select1'], 50):.2f}", f"{pct(lat['select1'], 95):.2f}"],
            ["`memory_links_of` (outbound + backlinks, resolved)", f"{pct(lat['links_of'], 50):.2f}",
             f"{pct(lat['links_of'], 95):.2f}"],
            ["`expand_memory` (1 transclusion with #anchor)", f"{pct(lat['expand'], 50):.2f}",
             f"{pct(lat['expand'], 95):.2f}"],
            [f"`link_graph`, whole room ({n:,} memories)", f"{statistics.median(whole['graph']):.0f}", "-"],
            [f"`link_integrity`, whole room ({n:,} memories)", f"{statistics.median(whole['integrity']):.0f}", "-"],
        ],
    )
    md = "\n".join([
        "## Links parsed by the database (`bench/links.py`)",
        "",
        f"{stamp()} · {machine()} · {n:,} memories per variant, {args.repeats} repeats (medians), "
        f"{args.calls - 10} timed calls per read. The 1-minute load average was {load_before:.1f} at the start "
        f"and {os.getloadavg()[0]:.1f} at the end (2 cores; above ~1, other processes shared them).",
        "",
        writes,
        "",
        f"The trigger adds about {overhead_linked:.0f} µs to a write of a linked body; "
        + (f"{overhead_plain:.0f} µs to one without link syntax."
           if overhead_plain > 0 else
           f"to one without link syntax, nothing measurable ({overhead_plain:.0f} µs: below the noise)."),
        "",
        reads,
    ])
    print(md)
    if not args.no_write:
        write_section("links", md)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=5000, help="memories per variant")
    p.add_argument("--links", type=int, default=6, help="body links per linked memory")
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--calls", type=int, default=310)
    p.add_argument("--whole-runs", type=int, default=5)
    p.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
