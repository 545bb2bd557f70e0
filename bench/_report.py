"""Shared by the benchmarks: write one section of BENCHMARKS.md, and describe the machine."""

from __future__ import annotations

import os
import platform
import re
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def machine() -> str:
    cpus = os.cpu_count()
    try:
        meminfo = Path("/proc/meminfo").read_text().splitlines()
        mem_kb = int(next(line for line in meminfo if line.startswith("MemTotal")).split()[1])
        mem = f"{mem_kb / 1024 / 1024:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        mem = "? GiB"
    return f"{cpus} cores, {mem}, {platform.system()} {platform.machine()}, Python {platform.python_version()}"


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def write_section(name: str, markdown: str) -> None:
    """Replace the ``<!-- bench:name -->`` section of BENCHMARKS.md (appending it if missing)."""
    path = ROOT / "BENCHMARKS.md"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    block = f"<!-- bench:{name} -->\n{markdown.strip()}\n<!-- /bench:{name} -->"
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.S)
    text = pattern.sub(lambda _m: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def table(headers: list[str], rows: list[list[object]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)
