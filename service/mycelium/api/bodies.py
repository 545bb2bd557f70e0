"""How a request body becomes JSON: the one place every JSON route decodes its body.

A body that is not JSON by its content type is refused 415 naming ``application/json`` (a missing
content type is read as JSON); a body nested deeper than :data:`MAX_JSON_DEPTH` arrays and objects
is refused 400 ``malformed_json`` naming the limit, however deep it goes (the decoder's own
recursion limit, about a thousand levels, ends as the same refusal, and the depth is measured
without recursion), so no nesting reaches the models, the database or a 500.
"""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.serialization import decode_json
from litestar.types import Empty

from mycelium.errors import Refusal

MAX_JSON_DEPTH = 64
JSON_MEDIA_TYPE = "application/json"


def too_deep() -> Refusal:
    message = f"the request body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels, the limit"
    return Refusal(400, "malformed_json", message, {"max_depth": MAX_JSON_DEPTH})


def check_depth(value: Any) -> None:
    """Refuse ``value`` if its arrays and objects nest deeper than the limit (iteratively)."""
    if not isinstance(value, (dict, list)):
        return
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise too_deep()
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def is_json_media_type(content_type: str) -> bool:
    """True for ``application/json`` and ``application/*+json`` (parameters ignored), or none given."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media in ("", JSON_MEDIA_TYPE) or (media.startswith("application/") and media.endswith("+json"))


def unsupported_media_type(content_type: str) -> Refusal:
    media = content_type.split(";", 1)[0].strip()
    return Refusal(415, "unsupported_media_type",
                   f"the request body is {media}: send it as {JSON_MEDIA_TYPE}",
                   {"content_type": media, "accepted": [JSON_MEDIA_TYPE]})


class HubRequest(Request[Any, Any, Any]):
    """A request whose JSON body is checked for its media type and its depth as it is decoded."""

    async def json(self) -> Any:
        if self._json is not Empty:
            return self._json
        if self._connection_state.json is not Empty:
            self._json = self._connection_state.json
            return self._json
        content_type = self.headers.get("content-type", "")
        if not is_json_media_type(content_type):
            raise unsupported_media_type(content_type)
        body = await self.body()
        try:
            value = decode_json(body or b"null", type_decoders=self.route_handler.resolve_type_decoders())
        except RecursionError:
            raise too_deep() from None
        check_depth(value)
        self._json = self._connection_state.json = value
        return value
