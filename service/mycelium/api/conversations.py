"""Every route of the conversations feature, for the app to mount in one line."""

from __future__ import annotations

from typing import Any

from mycelium.api import messages, participate, sessions, stream

CONVERSATION_ROUTES: list[Any] = [
    messages.MessageController, *participate.ROUTES, *sessions.ROUTES, *stream.ROUTES,
]
