"""Patterns: scenario packs the hub loads into a room, paused, and starts once.

A pattern is a folder: ``pattern.yaml`` (the room, its engines, memories, protocols, runners, a task
and the run that sets them working) and the files it names. The hub ships a pack
(``mycelium/patterns/pack``); the operator may add one (``MYCELIUM_PATTERNS_DIR``). Reading is
:mod:`mycelium.patterns.pack`; loading and starting, :mod:`mycelium.patterns.load`.
"""
