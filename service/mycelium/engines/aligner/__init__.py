"""The aligner: negotiations brokered inside a task's thread on a NEGMAS SAO mechanism.

:mod:`.snap` snaps read offers onto the issue space, :mod:`.moves` reads replies into moves,
:mod:`.issues` collects positions and discovers the issues, :mod:`.mechanism` drives (and replays)
the NEGMAS mechanism, :mod:`.metrics` measures the outcome, :mod:`.negotiation` is one move, and
:mod:`.worker` runs it on the engines loop. NEGMAS is imported only when a negotiation moves.
"""
