"""A SLIM node: the router members and moderators connect to (``mycelium slim``, or in the process
of ``mycelium up``). It forwards MLS ciphertext and sees no message text."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from mycelium.slim.runtime import SlimUnavailable, bindings, host_port, reachable

#: The node this process runs, if it runs one (``/health`` reports it).
_served: Node | None = None


class Node:
    """A node listening on ``listen`` (host:port) in this process, until :meth:`stop`. It runs on the
    library's own threads, so it needs no event loop of ours."""

    def __init__(self, listen: str) -> None:
        host, port = host_port(listen)
        self.listen = f"{host}:{port}"
        self.endpoint = f"http://{self.listen}"
        self._service: Any = None

    def start(self) -> None:
        global _served
        if reachable(self.endpoint, 0.2):
            raise SlimUnavailable(f"{self.listen} is in use (another SLIM node, or another program)")
        slim = bindings()
        service = slim.Service("mycelium-node")
        try:
            service.run_server(slim.new_insecure_server_config(self.listen))
        except Exception as exc:
            raise SlimUnavailable(f"the SLIM node cannot listen on {self.listen}: {exc}") from exc
        self._service = service
        _served = self
        deadline = time.monotonic() + 5.0
        while not reachable(self.endpoint, 0.2):  # it listens a moment after run_server returns
            if time.monotonic() > deadline:
                self.stop()
                raise SlimUnavailable(f"the SLIM node did not start listening on {self.listen}")
            time.sleep(0.02)

    def stop(self) -> None:
        global _served
        if self._service is not None:
            with contextlib.suppress(Exception):  # a node that already stopped
                self._service.stop_server(self.listen)
            self._service = None
        if _served is self:
            _served = None


def served() -> Node | None:
    return _served
