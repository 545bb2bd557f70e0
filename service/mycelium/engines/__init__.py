"""Engines: members of a room played by the hub's workers.

* :mod:`~mycelium.engines.flows` — the flow model (``Step``, ``Protocol``), its validation and the
  built-in flows;
* :mod:`~mycelium.engines.select` — the leximin pick over ratings and its scorecard;
* :mod:`~mycelium.engines.conductor` — the conductor's pure core: the summon grammar, role binding,
  step targets, edges, and what one step posts and records;
* :mod:`~mycelium.engines.persona` — a member played by a model in character;
* :mod:`~mycelium.engines.models` — the one model seam (scripted, an OpenAI-compatible endpoint, ``pi``).

Nothing here holds state between calls: the database holds every run (``sql/runs.sql``), and
``mycelium.workers.engines`` is the loop that claims runs and summons and steps them.
"""
