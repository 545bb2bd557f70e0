"""The Litestar application: one hub runtime, thin routes, one error shape."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar
from litestar.di import Provide
from litestar.plugins.pydantic import PydanticPlugin

from mycelium import __version__
from mycelium.api import (
    assignments,
    board,
    config,
    docs,
    engines,
    errors,
    events,
    export,
    fields,
    files,
    health,
    joins,
    links,
    memory,
    observability,
    patterns,
    rooms,
    runners,
    skills,
    slim,
    swarms,
    tasks,
    whoami,
)
from mycelium.api.bodies import HubRequest
from mycelium.api.conversations import CONVERSATION_ROUTES
from mycelium.api.deps import provide_hub
from mycelium.api.receipts import ReceiptController
from mycelium.api.transitions import TransitionController
from mycelium.auth.gate import gate_middleware, start_gate, token_verifier
from mycelium.hub import Hub
from mycelium.settings import Settings, load_settings
from mycelium.web import ROUTES as WEB_ROUTES
from mycelium.web import template_config
from mycelium.workers.catalogue import default_loops


def create_app(
    settings: Settings | None = None, *, hub: Hub | Callable[[], Hub] | None = None,
    on_ready: Callable[[Hub], None] | None = None, loops: bool = True,
) -> Litestar:
    """The hub's HTTP app; with ``loops`` its process also runs the background loops (a pure HTTP
    replica leaves them to ``mycelium worker`` processes). ``hub`` may be a function that gives the
    hub each time the app starts: one app served over several hubs in turn (building the app costs
    far more than starting a hub)."""
    settings = settings or load_settings()
    hubs: Callable[[], Hub]
    if hub is None or isinstance(hub, Hub):
        one = hub or Hub(settings, loops=default_loops(settings) if loops else [])

        def hubs() -> Hub:
            return one
    else:
        hubs = hub
    verifier = token_verifier(settings)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        hub = hubs()
        await hub.start()
        app.state.member_tokens = None if verifier is None else await start_gate(hub, verifier)
        app.state.token_verifier = verifier
        app.state.hub = hub
        if on_ready is not None:
            on_ready(hub)
        try:
            yield
        finally:
            await hub.stop()

    handlers: list[Any] = [
        health.health,
        rooms.RoomController,
        memory.MemoryController,
        memory.HistoryController,
        *links.ROUTES,
        skills.SkillController,
        tasks.TaskController, assignments.AssignmentController, fields.FieldsController, *board.ROUTES,
        *CONVERSATION_ROUTES,
        TransitionController, ReceiptController,
        engines.EngineController, runners.RunnerController, swarms.SwarmController,
        files.FileController, patterns.PatternController, patterns.RoomPatternController,
        observability.usage, *events.ROUTES,
        *config.ROUTES,
        whoami.whoami, *joins.ROUTES, export.export_room, *slim.ROUTES,
        docs.assets_router(),
        *WEB_ROUTES,
    ]
    return Litestar(
        route_handlers=handlers,
        dependencies={"hub": Provide(provide_hub)},
        exception_handlers=errors.HANDLERS,
        request_class=HubRequest,
        plugins=[PydanticPlugin(validate_strict=True)],  # "yes" is not a boolean, "30" not a number
        lifespan=[lifespan],
        middleware=gate_middleware(verifier),
        request_max_body_size=settings.max_body_bytes,
        openapi_config=docs.openapi_config("Mycelium hub", __version__),
        template_config=template_config(),
        debug=False,
    )


def create_http_app() -> Litestar:
    """A pure HTTP replica (no background loops), for ``mycelium up --workers N --no-workers``."""
    return create_app(loops=False)
