"""The CLI's HTTP client: requests to the hub at ``MYCELIUM_API_URL``, with the standard library.

Agents run ``mycelium await`` and ``respond`` in loops, so a call's start-up is paid every turn, and
importing ``http.client`` costs a fraction of importing ``httpx`` (see ``bench/cli.py``). It
behaves as httpx did for the CLI: one connection per request, JSON in and out, no redirects
followed, certificates checked against certifi's bundle (or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``),
and ``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``ALL_PROXY`` / ``NO_PROXY`` obeyed (http:// proxies; HTTPS
through a ``CONNECT`` tunnel).
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, NoReturn
from urllib.parse import SplitResult, unquote, urlencode, urlsplit

from mycelium import __version__, environment

USER_AGENT = f"mycelium-cli/{__version__}"


class CliError(SystemExit):
    """Print a message to stderr and exit with status 1."""

    def __init__(self, message: str) -> None:
        print(message, file=sys.stderr)
        super().__init__(1)


def fail(message: str) -> NoReturn:
    raise CliError(message)


def api_url() -> str:
    return environment.api_url()


class Response:
    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.body = body
        self.headers = headers or {}  # names in lower case

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.body)


def query(params: dict[str, Any] | None) -> str:
    """``?a=1&b=true`` from the params that are not None (lists repeat their name)."""
    pairs: list[tuple[str, str]] = []
    for name, value in (params or {}).items():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if item is not None:
                pairs.append((name, str(item).lower() if isinstance(item, bool) else str(item)))
    return "?" + urlencode(pairs) if pairs else ""


def request(method: str, path: str, *, json_body: Any = None, params: dict[str, Any] | None = None,
            timeout: float = 60.0) -> Response:
    """One request on its own connection; a network failure is the one-line "cannot reach" error."""
    conn, target, headers = _open(api_url() + path + query(params), timeout)
    try:
        body = None
        if json_body is not None:
            body = json.dumps(json_body, ensure_ascii=False, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        conn.request(method, target, body=body, headers=headers)
        response = conn.getresponse()
        headers = {name.lower(): value for name, value in response.getheaders()}
        return Response(response.status, response.read(), headers)
    except (OSError, http.client.HTTPException) as exc:
        unreachable(exc)
    finally:
        conn.close()


def call(method: str, path: str, *, json_body: Any = None, params: dict[str, Any] | None = None,
         timeout: float = 60.0, ok: tuple[int, ...] = ()) -> Any:
    """One request to the hub; a refusal becomes a one-line error (status, code, message)."""
    response = request(method, path, json_body=json_body, params=params, timeout=timeout)
    if response.status >= 400 and response.status not in ok:
        refused(response)
    if response.status == 204 or not response.body:
        return None
    try:
        return response.json()
    except ValueError:
        return response.text


def stream_lines(path: str, params: dict[str, Any] | None = None, *, connect_timeout: float = 10.0
                 ) -> Iterator[str]:
    """The lines of a streamed response as they arrive (no read timeout: a quiet stream may wait).
    A refusal ends the command; a dropped connection raises ``OSError``/``HTTPException``."""
    conn, target, headers = _open(api_url() + path + query(params), connect_timeout)
    try:
        conn.request("GET", target, headers=headers)
        response = conn.getresponse()
        if response.status >= 400:
            refused(Response(response.status, response.read()))
        if conn.sock is not None:
            conn.sock.settimeout(None)
        for raw in response:
            yield raw.decode("utf-8", "replace").rstrip("\r\n")
    finally:
        conn.close()


def follow_stream(path: str, params: Callable[[], dict[str, Any]], on_data: Callable[[Any], None]) -> int:
    """Follow a server-sent event stream until Ctrl-C: ``on_data`` gets each event's data (JSON);
    when the stream drops (a hub restart, a network blip) it is opened again with ``params()`` (where
    the caller left off), and 30 failures in a row end the command in one line."""
    failures = 0
    try:
        while True:
            try:
                for raw in stream_lines(path, params()):  # a quiet stream sends keepalives only
                    failures = 0
                    if raw.startswith("data: "):
                        on_data(json.loads(raw[6:]))
            except (OSError, http.client.HTTPException) as exc:
                failures += 1
                if failures >= 30:
                    unreachable(exc)
            time.sleep(1.0)
    except KeyboardInterrupt:
        return 0


def refused(response: Response) -> NoReturn:
    try:
        body = response.json()
        message = body.get("message") or body
        code = body.get("error", "")
    except (ValueError, AttributeError):
        message, code = response.text, ""
    fail(f"{response.status} {code}: {message}".replace("  ", " "))


def unreachable(exc: BaseException) -> NoReturn:
    fail(f"cannot reach the hub at {api_url()}: {exc} (is `mycelium up` running? set MYCELIUM_API_URL)")


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=False, default=str))


# -- connections ----------------------------------------------------------------------------------


def _open(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str, dict[str, str]]:
    """A connection for ``url`` (direct, or through the environment's proxy), the request target
    and the request's headers."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        fail(f"MYCELIUM_API_URL must be an http:// or https:// URL, not {api_url()!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    token = environment.token()
    if token:  # a gated hub's bearer token (MYCELIUM_TOKEN, or the folder's membership)
        headers["Authorization"] = f"Bearer {token.strip()}"
    proxy = _proxy_for(parts)
    if proxy is None:
        return _connection(parts.scheme, parts.hostname, port, timeout), target, headers
    if parts.scheme == "https":  # a tunnel: the proxy sees the host, not the request
        conn = _connection("https", proxy.hostname or "", proxy.port or 80, timeout)
        conn.set_tunnel(parts.hostname, port, headers=_proxy_auth(proxy))
        return conn, target, headers
    conn = _connection("http", proxy.hostname or "", proxy.port or 80, timeout)
    return conn, url, {**headers, **_proxy_auth(proxy)}  # an HTTP proxy is sent the absolute URL


def _connection(scheme: str, host: str, port: int, timeout: float) -> http.client.HTTPConnection:
    if scheme == "http":  # (1 MiB blocks: a streamed upload is not sent 8 KiB at a time)
        return http.client.HTTPConnection(host, port, timeout=timeout, blocksize=1 << 20)
    import ssl

    cafile = None
    if not (os.environ.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_DIR")):
        try:
            import certifi

            cafile = certifi.where()
        except ImportError:
            pass
    context = ssl.create_default_context(cafile=cafile)
    return http.client.HTTPSConnection(host, port, timeout=timeout, context=context, blocksize=1 << 20)


def _proxy_for(url: SplitResult) -> SplitResult | None:
    """The proxy the environment names for ``url``, unless ``NO_PROXY`` exempts its host."""
    env = {name.lower(): value for name, value in os.environ.items()
           if name.lower().endswith("_proxy") and value}
    proxy = env.get(f"{url.scheme}_proxy") or env.get("all_proxy")
    if not proxy or _exempt(url.hostname or "", env.get("no_proxy", "")):
        return None
    parts = urlsplit(proxy if "://" in proxy else "http://" + proxy)
    if parts.scheme != "http" or not parts.hostname:
        fail(f"the CLI goes through http:// proxies only, not {proxy!r} "
             f"(NO_PROXY={url.hostname} would go direct)")
    return parts


def _exempt(host: str, no_proxy: str) -> bool:
    """``NO_PROXY``: ``*``, or hosts (a name covers its subdomains; a scheme or port is ignored)."""
    host = host.lower()
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if entry == "*":
            return True
        entry = entry.split("://", 1)[-1]
        if entry.count(":") == 1:  # host:port (an IPv6 address has more colons)
            entry = entry.split(":", 1)[0]
        entry = entry.strip("[]").lstrip(".")
        if entry and (host == entry or host.endswith("." + entry)):
            return True
    return False


def _proxy_auth(proxy: SplitResult) -> dict[str, str]:
    if proxy.username is None:
        return {}
    import base64

    pair = f"{unquote(proxy.username)}:{unquote(proxy.password or '')}".encode()
    return {"Proxy-Authorization": "Basic " + base64.b64encode(pair).decode()}
