"""The opt-in token gate: bearer JWTs verified against configured issuers, the principal each one
names, and the middleware that admits a request (``MYCELIUM_AUTH``; off by default).

What a principal may do is decided once, in the verb gateway (:func:`mycelium.verbs.gateway.admit`):
its handle is the actor of every write, an operator may act for others and call the administrative
verbs (``-- needs: operator`` in ``sql/queries``), a viewer only reads.
"""
