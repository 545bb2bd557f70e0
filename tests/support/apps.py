"""The Litestar app of a test's hub. Building the app (every route's signature and schema) costs
some 0.35 s, starting a hub on a database a few milliseconds, so one app per distinct hub settings
is built once per session and served over each test's own hub in turn; an app already being served
(two hubs of one test at once) is not shared: that hub gets an app of its own."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from mycelium.hub import Hub

_apps: dict[str, _Shared] = {}


class _Shared:
    def __init__(self, hub: Hub) -> None:
        from mycelium.api.app import create_app

        self.hub: Hub | None = None
        self.on_ready: Callable[[Hub], None] | None = None
        self.app = create_app(hub.settings, hub=self._hub, on_ready=self._ready)

    def _hub(self) -> Hub:
        assert self.hub is not None, "a shared app started with no hub to serve"
        return self.hub

    def _ready(self, hub: Hub) -> None:
        if self.on_ready is not None:
            self.on_ready(hub)


@contextlib.contextmanager
def app_for(hub: Hub, on_ready: Callable[[Hub], None] | None = None) -> Iterator[Any]:
    """An app that serves ``hub`` (started and stopped by the app's lifespan) while in the block."""
    shape = hub.settings.model_dump_json(exclude={"database_url", "data_dir"})
    shared = _apps.get(shape)
    if shared is not None and shared.hub is not None:  # in use: this hub's own app
        from mycelium.api.app import create_app

        yield create_app(hub.settings, hub=hub, on_ready=on_ready)
        return
    if shared is None:
        shared = _apps[shape] = _Shared(hub)
    shared.hub, shared.on_ready = hub, on_ready
    try:
        yield shared.app
    finally:
        shared.hub = shared.on_ready = None
