"""Every background loop by name, and which of them a process runs."""

from __future__ import annotations

from collections.abc import Iterable

from mycelium.settings import Settings
from mycelium.slim.publisher import SLIM
from mycelium.slim.runtime import available as slim_available
from mycelium.workers import LOOP_NAMES
from mycelium.workers.compile import COMPILE
from mycelium.workers.engines import ENGINES
from mycelium.workers.indexer import INDEXER
from mycelium.workers.loop import Loop
from mycelium.workers.mirror import MIRROR
from mycelium.workers.otel import OTEL, logs_url
from mycelium.workers.receipts import RECEIPTS
from mycelium.workers.runners import RUNNERS
from mycelium.workers.sweeper import SETTINGS, SWEEPER

LOOPS: dict[str, Loop] = {loop.name: loop for loop in (INDEXER, SWEEPER, SETTINGS, MIRROR, RECEIPTS, ENGINES,
                                                            COMPILE, SLIM, RUNNERS, OTEL)}
assert tuple(LOOPS) == LOOP_NAMES, "mycelium.workers.LOOP_NAMES names every loop, in order"


def default_loops(settings: Settings, only: Iterable[str] = (), skip: Iterable[str] = ()) -> list[Loop]:
    """The loops a process runs: all of them (``only`` narrows, ``skip`` removes), except the mirror
    when it is off, the indexer when there is no embedder, the SLIM channels when they are off
    or slim-bindings is not installed, and the OpenTelemetry exporter when no collector is set."""
    chosen, dropped = set(only), set(skip)
    unknown = sorted((chosen | dropped) - LOOPS.keys())
    if unknown:
        raise ValueError(f"no loop named {', '.join(unknown)} (loops: {', '.join(LOOPS)})")
    off = {"mirror": "the mirror is off"} if not settings.mirror else {}
    if settings.embedder == "none":
        off["indexer"] = "there is no embedder (embedder: none)"
    if settings.slim == "off":
        off["slim"] = "rooms as SLIM channels are off (MYCELIUM_SLIM=off)"
    elif (missing := slim_available()) is not None:
        off["slim"] = missing
    if logs_url(settings) is None:
        off["otel"] = "no collector is set (OTEL_EXPORTER_OTLP_ENDPOINT)"
    asked = sorted(chosen & off.keys())
    if asked:
        raise ValueError("; ".join(f"{name} cannot run: {off[name]}" for name in asked))
    return [loop for name, loop in LOOPS.items()
            if (not chosen or name in chosen) and name not in dropped and name not in off]
