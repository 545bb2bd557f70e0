"""The guards' overhead per call, beside a bare call of the same function, in one process.

Each variant runs ``--calls`` times per round; the figure is the median over ``--rounds`` of the time
per call, and the overhead is that minus the bare call's (sync or async, the tool's kind):

* ``@protect`` / ``protect_sync``: a hit (inside a Session, the entry warm) and a miss (a new entity
  on every call: the lookup, the call and the store);
* ``@bounded`` / ``bounded_sync``: one required string field with a pattern, checked before the call;
  and with an output schema of two fields checked after it;
* ``MessageValidator``: ``validate`` and ``repair`` of a 200-message transcript (100 tool calls and
  their results), per transcript;
* ``HistoryGuard.validate`` of the same transcript (estimate, and the installed tokenizer with its
  per-text counts warm), per transcript.

``python bench/guards.py [--rounds 5] [--calls 20000] [--no-write]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine, stamp, table, write_section
from mycelium import HistoryGuard, MessageValidator, Session, bounded, bounded_sync, protect, protect_sync

SCHEMA = {"customer_id": {"type": "string", "required": True, "pattern": r"^c\d+$"}}
RECORD = {"customer_id": {"type": "string", "required": True}, "name": {"type": "string", "required": True}}


def fetch(customer_id: str) -> dict:
    return {"customer_id": customer_id, "name": "Alice"}


async def afetch(customer_id: str) -> dict:
    return {"customer_id": customer_id, "name": "Alice"}


def transcript(n: int = 200) -> list[dict]:
    out: list[dict] = [{"role": "system", "content": "You are a careful billing agent."}]
    i = 0
    while len(out) < n:
        out.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": "fetch_customer", "arguments": f'{{"customer_id": "c{i}"}}'}}]})
        out.append({"role": "tool", "tool_call_id": f"call_{i}", "content": f"customer c{i}: Alice, 3 invoices"})
        i += 1
    return out[:n]


def per_call_sync(body: Callable[[int], object], calls: int) -> float:
    start = time.perf_counter()
    for i in range(calls):
        body(i)
    return (time.perf_counter() - start) / calls * 1e6


def per_call_async(body: Callable[[int], object], calls: int) -> float:
    async def loop() -> float:
        start = time.perf_counter()
        for i in range(calls):
            await body(i)  # type: ignore[misc]
        return (time.perf_counter() - start) / calls * 1e6

    return asyncio.run(loop())


def variants(calls: int) -> dict[str, tuple[str, Callable[[], float]]]:
    """name -> (baseline name, measure)."""
    hit_sync = protect_sync(entity_param="customer_id", ttl=3600)(fetch)
    miss_sync = protect_sync(entity_param="customer_id", ttl=3600)(fetch)
    hit_async = protect(entity_param="customer_id", ttl=3600)(afetch)
    miss_async = protect(entity_param="customer_id", ttl=3600)(afetch)
    checked = bounded_sync(schema=SCHEMA)(fetch)
    checked_out = bounded_sync(schema=SCHEMA, output_schema=RECORD)(fetch)
    achecked = bounded(schema=SCHEMA)(afetch)
    messages = transcript()
    validator = MessageValidator()
    estimate = HistoryGuard(max_tokens=1_000_000, tokenizer="estimate", detect_duplicates=True)
    real = HistoryGuard(max_tokens=1_000_000)
    real.validate(messages)  # loads the tokenizer and warms the per-text counts

    def in_session(fn: Callable[[], float]) -> Callable[[], float]:
        def run() -> float:
            with Session():
                return fn()
        return run

    few = max(calls // 100, 50)
    return {
        "bare call (sync)": ("", lambda: per_call_sync(lambda i: fetch(customer_id="c1"), calls)),
        "protect_sync hit": ("bare call (sync)", in_session(lambda: per_call_sync(
            lambda i: hit_sync(customer_id="c1"), calls))),
        "protect_sync miss": ("bare call (sync)", in_session(lambda: per_call_sync(
            lambda i: miss_sync(customer_id=i), calls))),
        "bounded_sync (input)": ("bare call (sync)", lambda: per_call_sync(
            lambda i: checked(customer_id="c1"), calls)),
        "bounded_sync (input + output)": ("bare call (sync)", lambda: per_call_sync(
            lambda i: checked_out(customer_id="c1"), calls)),
        "bare call (async)": ("", lambda: per_call_async(lambda i: afetch(customer_id="c1"), calls)),
        "@protect hit": ("bare call (async)", in_session(lambda: per_call_async(
            lambda i: hit_async(customer_id="c1"), calls))),
        "@protect miss": ("bare call (async)", in_session(lambda: per_call_async(
            lambda i: miss_async(customer_id=i), calls))),
        "@bounded (input)": ("bare call (async)", lambda: per_call_async(
            lambda i: achecked(customer_id="c1"), calls)),
        "MessageValidator.validate, 200 messages": ("", lambda: per_call_sync(
            lambda i: validator.validate(messages), few)),
        "MessageValidator.repair, 200 messages": ("", lambda: per_call_sync(
            lambda i: validator.repair(messages), few)),
        "HistoryGuard.validate, 200 messages (estimate)": ("", lambda: per_call_sync(
            lambda i: estimate.validate(messages), few)),
        "HistoryGuard.validate, 200 messages (tokenizer, warm)": ("", lambda: per_call_sync(
            lambda i: real.validate(messages), few)),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    found = variants(args.calls)
    samples: dict[str, list[float]] = {name: [] for name in found}
    for _ in range(args.rounds):  # rounds interleaved: host noise hits every variant alike
        for name, (_, measure) in found.items():
            samples[name].append(measure())
    median = {name: statistics.median(values) for name, values in samples.items()}
    rows = []
    for name, (base, _) in found.items():
        overhead = f"{median[name] - median[base]:.2f}" if base else "—"
        rows.append([name, f"{median[name]:.2f}", overhead])
        print(f"{name:58} {median[name]:10.2f} µs   overhead {overhead}")
    per_call = [median[n] - median[b] for n, (b, _) in found.items() if b]
    transcripts = {n: v for n, v in median.items() if "200 messages" in n}
    verdict = (
        f"Per-call guards: at most {max(per_call):.2f} µs of overhead (target ≤ 20 µs on a hit: "
        f"{'met' if max(per_call) <= 20 else 'missed'}; the hits add {median['protect_sync hit'] - median['bare call (sync)']:.2f} "
        f"µs sync and {median['@protect hit'] - median['bare call (async)']:.2f} µs async). The transcript guards "
        f"cost {min(transcripts.values()) / 200:.1f}–{max(transcripts.values()) / 200:.1f} µs per message, once per "
        "model call, not per tool call. The bare calls are the baseline on this (shared) host."
    )
    print(verdict)
    if args.no_write:
        return
    write_section("guards", f"""
## Guards: overhead per call (`bench/guards.py`) — {stamp()}

{machine()}; {args.rounds} interleaved rounds of {args.calls:,} calls (transcripts: {max(args.calls // 100, 50)}
per round), median per call. Overhead = the guarded call minus the bare call of the same function
(sync or async); a transcript guard's figure is its whole cost per 200-message transcript. The host's
2 cores were shared with other work while this ran: between runs the figures moved by up to 3×.

{table(["variant", "µs per call", "overhead µs"], rows)}

{verdict}
""")


if __name__ == "__main__":
    main()
