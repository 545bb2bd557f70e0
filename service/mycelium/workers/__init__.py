"""Background work: the vector indexer, the lease sweeper, the board settings, the mirror follower,
the receipt signer, the engines, the task compiler, the rooms' SLIM channels, the runners (which
start agents) and the OpenTelemetry exporter of usage events, each a named loop run by a supervisor
that records its state, backs off when it fails, leads where one process must do the work alone,
and reports every loop in the database (``mycelium.worker_loops``) and in ``/health``.

A ``mycelium worker`` runs them with no HTTP; ``mycelium up`` runs them beside its API unless told
``--no-workers``. Any number of processes may run them on one database.
"""

#: every loop's name, in the order a process starts them (mycelium.workers.catalogue holds the loops)
LOOP_NAMES = ("indexer", "sweeper", "settings", "mirror", "receipts", "engines", "compile", "slim", "runners",
              "otel")
