"""The native SLIM library (slim-bindings), loaded on first need, and what every user of it shares:
one initialisation per process, the group session's settings, a service connected to a node."""

from __future__ import annotations

import asyncio
import datetime
import socket
import time
from typing import Any
from urllib.parse import urlsplit

INSTALL_HINT = "slim-bindings is not installed (it comes with the hub: pip install 'mycelium-hub[hub]')"


class SlimUnavailable(RuntimeError):
    """This process cannot use SLIM (the library is missing, or the node is not reachable)."""


def bindings() -> Any:
    try:
        import slim_bindings
    except ImportError:
        raise SlimUnavailable(INSTALL_HINT) from None
    if not slim_bindings.is_initialized():
        tracing = slim_bindings.new_tracing_config()
        tracing.log_level = "off"  # the library logs to stdout; its errors reach us as exceptions
        slim_bindings.initialize_with_configs(
            tracing_config=tracing, runtime_config=slim_bindings.new_runtime_config(),
            service_config=[slim_bindings.new_service_config()])
    return slim_bindings


def available() -> str | None:
    """None when SLIM can be used here, else why not (one line)."""
    try:
        bindings()
    except SlimUnavailable as exc:
        return str(exc)
    return None


def host_port(endpoint: str) -> tuple[str, int]:
    """``http://127.0.0.1:46357`` (or ``127.0.0.1:46357``) as host and port."""
    parts = urlsplit(endpoint if "//" in endpoint else f"http://{endpoint}")
    if not parts.hostname or not parts.port:
        raise ValueError(f"a SLIM endpoint is host:port or http://host:port (got {endpoint!r})")
    return parts.hostname, parts.port


def reachable(endpoint: str, timeout: float = 0.5) -> bool:
    host, port = host_port(endpoint)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


async def wait_reachable(endpoint: str, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not await asyncio.to_thread(reachable, endpoint, 0.2):
        if time.monotonic() > deadline:
            raise SlimUnavailable(f"no SLIM node answers at {endpoint}")
        await asyncio.sleep(0.05)


def group_config(retries: int = 3, interval_ms: int = 300) -> Any:
    """A room channel's session: a GROUP with MLS (end to end: the node sees ciphertext only)."""
    slim = bindings()
    return slim.SessionConfig(
        session_type=slim.SessionType.GROUP, max_retries=retries,
        interval=datetime.timedelta(milliseconds=interval_ms), metadata={},
        mls_settings=slim.MlsSettings(header_integrity_validation_percent=100,
                                      max_seen_control_message_ids_size=None))


_services = 0


async def connect(endpoint: str, tag: str) -> tuple[Any, int]:
    """A service of this process connected to the node at ``endpoint``: it and the connection id."""
    global _services
    slim = bindings()
    _services += 1
    service = slim.Service(f"{tag}-{_services}".lower())
    try:
        conn = await service.connect_async(slim.new_insecure_client_config(
            endpoint if "//" in endpoint else f"http://{endpoint}"))
    except Exception as exc:
        raise SlimUnavailable(f"cannot connect to the SLIM node at {endpoint}: {exc}") from exc
    return service, conn


def seconds(value: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=value)
