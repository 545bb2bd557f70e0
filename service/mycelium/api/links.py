"""Links and skills routes (filled in by the links feature)."""

from __future__ import annotations

from typing import Any

ROUTES: list[Any] = []
