"""Settings as the environment writes them, read with the standard library alone.

A setting ``name`` is the variable ``MYCELIUM_NAME`` (``database_url`` also answers to the
conventional ``DATABASE_URL``), taken from the process environment, else from a ``.env`` file in
the working directory; an empty value counts as unset. This module is the one place that says so,
and that holds the defaults the CLI needs: the hub's typed ``Settings`` read every field through
``value`` and take these defaults, and the ``mycelium`` command reads them here without loading
pydantic.

The data directory (the embedded database, the markdown mirror, the receipt signing keys: the
hub's state and identity) is resolved by ``data_dir`` for every command: ``--data-dir``, else
``MYCELIUM_DATA_DIR``, else the nearest ``.mycelium`` folder in the working directory or above it,
else ``./.mycelium`` (which only ``mycelium up`` creates).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

PREFIX = "MYCELIUM_"
ENV_FILE = ".env"
DATA_DIR_NAME = ".mycelium"
DEFAULT_API_URL = "http://127.0.0.1:8000"

#: settings that answer to more than their own variable, in order of precedence
_NAMES = {"database_url": ("MYCELIUM_DATABASE_URL", "DATABASE_URL"),
          # OpenTelemetry's own variables (MYCELIUM_* first, as for every setting)
          "otel_endpoint": ("MYCELIUM_OTEL_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"),
          "otel_logs_endpoint": ("MYCELIUM_OTEL_LOGS_ENDPOINT", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"),
          "otel_headers": ("MYCELIUM_OTEL_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"),
          "otel_service_name": ("MYCELIUM_OTEL_SERVICE_NAME", "OTEL_SERVICE_NAME")}


def names(setting: str) -> tuple[str, ...]:
    """The variables that set ``setting``, first one wins."""
    return _NAMES.get(setting, (PREFIX + setting.upper(),))


def value(setting: str) -> str | None:
    """The setting's text: the environment's, else the ``.env`` file's; None when neither sets it."""
    return values([setting]).get(setting)


def values(settings: Iterable[str]) -> dict[str, str]:
    """The text of each of ``settings`` that the environment or the ``.env`` file sets."""
    found: dict[str, str] = {}
    written: dict[str, str] | None = None
    for setting in settings:
        given = [os.environ.get(name) for name in names(setting)]
        if not any(given):
            written = read_env_file(Path(ENV_FILE)) if written is None else written
            given = [written.get(name) for name in names(setting)]
        text = next((g for g in given if g), None)
        if text is not None:
            found[setting] = text
    return found


def read_env_file(path: Path) -> dict[str, str]:
    """``NAME=value`` lines (``export`` allowed; ``#`` comments; values may be quoted, double
    quotes with backslash escapes). A missing file is empty."""
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return {}
    found: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        name, sep, rest = line.partition("=")
        name = name.strip()
        if not sep or not name or name.startswith("#"):
            continue
        found[name] = _unquote(rest.strip())
    return found


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}


def _unquote(text: str) -> str:
    if text[:1] == "'":
        end = text.find("'", 1)
        return text[1:end] if end > 0 else text[1:]
    if text[:1] == '"':
        out, i = [], 1
        while i < len(text) and text[i] != '"':
            if text[i] == "\\" and i + 1 < len(text):
                i += 1
                out.append(_ESCAPES.get(text[i], text[i]))
            else:
                out.append(text[i])
            i += 1
        return "".join(out)
    comment = text.find(" #")
    return (text[:comment] if comment >= 0 else text).rstrip()


# -- the CLI's settings ---------------------------------------------------------------------------


def api_url() -> str:
    """Where the CLI finds the hub."""
    return (value("api_url") or DEFAULT_API_URL).rstrip("/")


def room() -> str | None:
    """The CLI's default room (``--room`` overrides)."""
    return value("room")


def default_handle() -> str:
    return os.environ.get("USER") or "cli"


def handle() -> str:
    """Who the CLI writes as (``--as`` overrides): ``MYCELIUM_HANDLE``, else the folder's membership,
    else the login name."""
    return value("handle") or (membership() or {}).get("handle") or default_handle()


MEMBER_FILE = "member.json"


def membership_file() -> Path | None:
    """The nearest ``.mycelium/member.json`` in the working directory or above it."""
    here = Path.cwd()
    for folder in (here, *here.parents):
        candidate = folder / DATA_DIR_NAME / MEMBER_FILE
        if candidate.is_file():
            return candidate
    return None


def membership() -> dict[str, str] | None:
    """What ``mycelium join`` saved for this folder (room, handle, hub, token), if anything."""
    found = membership_file()
    if found is None:
        return None
    try:
        import json

        data = json.loads(found.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def token() -> str | None:
    """The bearer token the CLI sends: ``MYCELIUM_TOKEN``, else the folder's membership's."""
    return value("token") or (membership() or {}).get("token") or None


def database_url() -> str | None:
    """A PostgreSQL server; None: the embedded one in the data directory."""
    return value("database_url")


# -- the data directory ---------------------------------------------------------------------------


class DataDir:
    """A data directory (absolute) and how it was chosen: the flag, the variable, or what the
    default found (for messages). (A plain class: ``dataclasses`` costs a CLI call milliseconds.)"""

    __slots__ = ("chosen_by", "path")

    def __init__(self, path: Path, chosen_by: str) -> None:
        self.path = path
        self.chosen_by = chosen_by


def data_dir(flag: Path | str | None = None) -> DataDir:
    """The data directory: ``--data-dir``, else ``MYCELIUM_DATA_DIR``, else the default."""
    if flag:
        return DataDir(absolute(flag), "given with --data-dir")
    written = value("data_dir")
    if written:
        return DataDir(absolute(written), f"set by {names('data_dir')[0]}")
    return _default()


def default_data_dir() -> Path:
    """The nearest ``.mycelium`` folder in the working directory or above it, else ``./.mycelium``."""
    return _default().path


def _default() -> DataDir:
    here = Path.cwd()
    for folder in (here, *here.parents):
        candidate = folder / DATA_DIR_NAME
        if candidate.is_dir():
            where = "the working directory" if folder == here else f"{folder}, above the working directory"
            return DataDir(candidate, f"the nearest {DATA_DIR_NAME} folder, found in {where}")
    none = f"the default: there is no {DATA_DIR_NAME} folder in {here} or above it"
    return DataDir(here / DATA_DIR_NAME, none)


def absolute(path: Path | str) -> Path:
    return Path(path).expanduser().resolve()
