"""Sizes as a person reads them (the CLI's lines, the web app's pages)."""

from __future__ import annotations


def human_size(n: int) -> str:
    """``n`` bytes: ``512 B``, ``1.5 KiB`` … ``2.0 GiB``."""
    amount = float(n)
    for unit in ("B", "KiB", "MiB"):
        if amount < 1024:
            return f"{n} B" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{amount:.1f} GiB"
