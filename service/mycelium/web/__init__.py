"""The web app every replica serves at ``/``: server-rendered pages from the same verbs the API
calls, readable without JavaScript, and one small script of the project's own (``static/live.js``)
that refreshes a page's parts when the room's stream says something moved.

``ROUTES`` are the pages, the forms and the static files; ``template_config()`` is the templates'
environment, for the app to mount.
"""

from __future__ import annotations

from typing import Any

from litestar import Router
from litestar.datastructures import CacheControlHeader
from litestar.static_files import create_static_files_router

from mycelium.api.deps import VERBS
from mycelium.web import actions, episodes, errors, jobs, ledger, login, metrics, pages, patterns
from mycelium.web.render import STATIC, template_config

ROUTES: list[Any] = [
    Router(path="/", route_handlers=[*pages.ROUTES, *episodes.ROUTES, *ledger.ROUTES, *actions.ROUTES,
                                     *login.ROUTES, *jobs.ROUTES, *metrics.ROUTES,
                                     *patterns.ROUTES],
           dependencies=VERBS, exception_handlers=errors.HANDLERS, include_in_schema=False),
    create_static_files_router(path="/static", directories=[STATIC],
                               cache_control=CacheControlHeader(max_age=300)),
]

__all__ = ["ROUTES", "template_config"]
