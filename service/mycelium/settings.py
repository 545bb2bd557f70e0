"""One settings object for the hub and the workers, typed and checked.

Each field is read from the environment by ``mycelium.environment`` (``MYCELIUM_<FIELD>``, plus the
conventional ``DATABASE_URL``, then a ``.env`` file in the working directory), the module the
``mycelium`` command reads its own few settings from without this one. Command-line flags override
both by building a copy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from mycelium import environment


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")

    database_url: str | None = None
    """A PostgreSQL server (>= 15 with pgvector). Unset: the embedded server under ``data_dir``."""

    data_dir: Path = Field(default_factory=environment.default_data_dir)
    """Embedded database, markdown mirror and hub keys live here (see ``mycelium.environment``)."""

    host: str = "127.0.0.1"
    port: int = 8000
    api_url: str = environment.DEFAULT_API_URL
    """Where the CLI finds the hub."""
    room: str | None = None
    """The CLI's default room (``--room`` overrides)."""
    handle: str = Field(default_factory=environment.default_handle)
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

    auth: bool = False
    """The token gate (``MYCELIUM_AUTH=on``): every route but ``/health``, the docs and
    ``POST /api/joins/redeem`` needs a bearer JWT of a configured issuer. Off: nothing is asked."""
    auth_issuers: str | None = None
    """The issuers the gate trusts: JSON, or ``@file`` (see ``mycelium.auth.issuers``)."""
    auth_secret: str | None = Field(default=None, repr=False, min_length=32)
    """The secret the hub's member-token key is sealed under in the database (every replica of a
    deployment needs the same one); without it join codes still admit members, with no token."""
    auth_leeway_seconds: float = Field(default=30.0, ge=0, le=300)
    """How far ``exp`` and ``nbf`` may be off (clock skew)."""

    slim: Literal["on", "off"] = "on"
    """Rooms as SLIM group channels (``MYCELIUM_SLIM=off`` turns them off): every process running the
    background loops moderates and publishes the rooms whose channel lock it holds."""
    slim_endpoint: str = "http://127.0.0.1:46357"
    """The SLIM node the hub's moderators connect to, and members are told to."""
    slim_serve: bool = True
    """``mycelium up`` runs that node in its own process when nothing listens there yet (off: the
    node is run elsewhere, e.g. by ``mycelium slim``)."""
    slim_secret: str = Field(default_factory=lambda: _dev_slim_secret(), repr=False, min_length=32)
    """The master secret each room's channel secret is derived from (contracts/slim-wire.json);
    members need the same one. The default is the development secret: set your own."""
    slim_identity: Literal["psk", "jwt"] = "psk"
    """``psk``: a member is who its channel name says (anyone with the room's secret). ``jwt``: every
    post carries a member token of the token gate for that room, whose ``sub`` is the author."""

    patterns_dir: Path | None = None
    """The operator's pattern pack (``MYCELIUM_PATTERNS_DIR``): a folder of pattern folders, beside
    the pack the hub ships; one of the same name is the operator's. The hub reads patterns from
    these folders only, never from a place a caller names."""

    otel_endpoint: str | None = None
    """An OTLP/HTTP collector (``OTEL_EXPORTER_OTLP_ENDPOINT``): usage events are sent to its
    ``/v1/logs`` as log records, by one process of the deployment (the ``otel`` loop)."""
    otel_logs_endpoint: str | None = None
    """The logs endpoint itself (``OTEL_EXPORTER_OTLP_LOGS_ENDPOINT``), used as given."""
    otel_headers: str | None = Field(default=None, repr=False)
    """Headers sent with each export (``OTEL_EXPORTER_OTLP_HEADERS``: ``k=v,k2=v2``)."""
    otel_service_name: str = "mycelium-hub"

    def resolved_data_dir(self) -> Path:
        return environment.absolute(self.data_dir)

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        **_others: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Values passed in, then the environment as ``mycelium.environment`` reads it (pydantic's
        own environment and ``.env`` readers are not used)."""
        return init_settings, _Environment(settings_cls)


class _Environment(PydanticBaseSettingsSource):
    """Every field's text from ``mycelium.environment.value``; pydantic checks and converts it."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return environment.value(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(environment.values(self.settings_cls.model_fields))


def _dev_slim_secret() -> str:
    from mycelium.slim.wire import dev_secret

    return dev_secret()


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment, with explicit (non-None) overrides applied on top."""
    base = Settings()
    clean = {k: v for k, v in overrides.items() if v is not None}
    return base.model_copy(update=clean) if clean else base
