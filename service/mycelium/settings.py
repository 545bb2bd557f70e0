"""One settings object for the hub, the CLI and the workers.

Values come from the environment (``MYCELIUM_*``, plus the conventional ``DATABASE_URL``) and from a
``.env`` file in the working directory. Command-line flags override both by building a copy.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="MYCELIUM_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("MYCELIUM_DATABASE_URL", "DATABASE_URL")
    )
    """A PostgreSQL server (>= 15 with pgvector). Unset: the embedded server under ``data_dir``."""

    data_dir: Path = Path(".mycelium")
    """Embedded database, markdown mirror and hub keys live here."""

    host: str = "127.0.0.1"
    port: int = 8000
    api_url: str = "http://127.0.0.1:8000"
    """Where the CLI finds the hub."""
    room: str | None = None
    """The CLI's default room (``--room`` overrides)."""
    handle: str = Field(default_factory=lambda: os.environ.get("USER") or "cli")
    """Who the CLI writes as (``--as`` overrides)."""

    app_role: str = "mycelium_app"
    """The hub connects as this role where the server allows it (verbs and reads only)."""

    pool_min_size: int = 2
    pool_max_size: int = 20

    max_body_bytes: int = 4 * 1024 * 1024
    """Requests with a larger body are refused with 413."""

    embedder: Literal["minilm", "http", "none"] = "minilm"
    """``minilm``: the bundled all-MiniLM-L6-v2 (int8 ONNX, offline). ``http``: an OpenAI-compatible
    ``/embeddings`` endpoint. ``none``: no vectors; search falls back to full text."""
    embedding_url: str | None = None
    embedding_model: str = "text-embedding-3-small"
    embedding_api_key: str | None = None
    embedding_dimensions: int = 384

    mirror: bool = True
    """Export memories as markdown under ``data_dir/rooms`` (one process at a time holds the mirror)."""

    migrate_on_start: bool = True

    board_dependency_gate: bool | None = None
    """When set, the hub writes it at start as the hub-wide ``board.dependency_gate`` (the setting
    itself lives in the database, so every replica obeys the same one; a room may override it)."""

    def resolved_data_dir(self) -> Path:
        return self.data_dir.expanduser().resolve()


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment, with explicit (non-None) overrides applied on top."""
    base = Settings()
    clean = {k: v for k, v in overrides.items() if v is not None}
    return base.model_copy(update=clean) if clean else base
