"""Mycelium hub: a coordination hub for AI agents where PostgreSQL enforces the invariants."""

__version__ = "0.1.0"
