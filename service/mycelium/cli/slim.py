"""``mycelium slim``: run a SLIM node on its own (the one the hub's replicas and the members share),
until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from mycelium import environment


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("slim", help="run a SLIM node for the rooms' channels (until Ctrl-C)")
    p.add_argument("--listen", default=None,
                   help="host:port to listen on (default: the host and port of MYCELIUM_SLIM_ENDPOINT, "
                        "127.0.0.1:46357)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mycelium.slim.node import Node
    from mycelium.slim.runtime import SlimUnavailable
    from mycelium.slim.wire import contract

    listen = args.listen or environment.value("slim_endpoint") or contract()["node_endpoint"]
    try:
        node = Node(listen)
        node.start()
    except (SlimUnavailable, ValueError) as exc:
        print(f"mycelium slim: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"SLIM node on {node.endpoint} (hubs and members: MYCELIUM_SLIM_ENDPOINT={node.endpoint})",
          flush=True)
    while not stop.wait(0.5):
        pass
    node.stop()
    return 0
