"""The CLI's HTTP client: a thin wrapper over the hub's API at ``MYCELIUM_API_URL``."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import httpx

from mycelium.settings import load_settings


class CliError(SystemExit):
    """Print a message to stderr and exit with status 1."""

    def __init__(self, message: str) -> None:
        print(message, file=sys.stderr)
        super().__init__(1)


def fail(message: str) -> NoReturn:
    raise CliError(message)


def api_url() -> str:
    return load_settings().api_url.rstrip("/")


def call(method: str, path: str, *, json_body: Any = None, params: dict[str, Any] | None = None,
         timeout: float = 60.0, ok: tuple[int, ...] = ()) -> Any:
    """One request to the hub; a refusal becomes a one-line error (status, code, message)."""
    url = api_url() + path
    clean = {k: v for k, v in (params or {}).items() if v is not None}
    try:
        response = httpx.request(method, url, json=json_body, params=clean, timeout=timeout)
    except httpx.HTTPError as exc:
        fail(f"cannot reach the hub at {api_url()}: {exc} (is `mycelium up` running? set MYCELIUM_API_URL)")
    if response.status_code >= 400 and response.status_code not in ok:
        try:
            body = response.json()
            message = body.get("message") or body
            code = body.get("error", "")
        except ValueError:
            message, code = response.text, ""
        fail(f"{response.status_code} {code}: {message}".replace("  ", " "))
    if response.status_code == 204 or not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return response.text


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=False, default=str))
