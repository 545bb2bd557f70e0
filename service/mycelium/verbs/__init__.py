"""The one gateway every caller reaches the SQL verbs through.

``verbs_of(hub).call(actor, "claim_task", room=…, key=…, …)``: named parameters, the actor declared
in the verb's own statement (the verb takes the author of its write from it), wake hints sent after
the commit, refusals raised as :class:`mycelium.errors.Refusal`. Beside it, one module per resource
holds the request models and the shapes of answers that every transport shares (``rooms``,
``memories``, ``board``, ``messages``, ``transitions``, ``settings``).
"""

from mycelium.verbs.actor import HUB_PRINCIPAL, HUB_PROCESS, KINDS, NOBODY, Actor, Kind, Principal
from mycelium.verbs.gateway import Session, Verbs, verbs_of, verbs_on

__all__ = ["HUB_PRINCIPAL", "HUB_PROCESS", "KINDS", "NOBODY", "Actor", "Kind", "Principal", "Session",
           "Verbs", "verbs_of", "verbs_on"]
