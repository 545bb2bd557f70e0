"""A plain progress bar on stderr (no dependency; silent when stderr is not a terminal)."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, label: str, width: int = 30) -> None:
        self.total = max(total, 1)
        self.label = label
        self.width = width
        self.done = 0
        self._tty = sys.stderr.isatty()
        self._last = 0.0

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self._tty and (now - self._last > 0.05 or self.done >= self.total):
            self._last = now
            filled = int(self.width * self.done / self.total)
            bar = "#" * filled + "-" * (self.width - filled)
            sys.stderr.write(f"\r{self.label} [{bar}] {self.done}/{self.total}")
            sys.stderr.flush()

    def close(self) -> None:
        if self._tty:
            sys.stderr.write("\n")
        else:
            sys.stderr.write(f"{self.label}: {self.done}/{self.total}\n")
        sys.stderr.flush()
