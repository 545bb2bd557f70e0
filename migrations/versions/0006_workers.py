"""Workers: the heartbeat table of every process that runs background loops

Revision ID: 0006_workers
Revises: 0005_settings
Create Date: 2026-12-01
"""

from alembic import op

from mycelium.db.migrate import drop_sql, run_script
from mycelium.paths import sql_dir

revision = "0006_workers"
down_revision = "0005_settings"
branch_labels = None
depends_on = None

TABLES = """
CREATE TABLE mycelium.worker_loops (
  worker_id uuid NOT NULL,
  loop text NOT NULL CHECK (loop ~ '^[a-z][a-z0-9_-]{0,63}$'),
  kind text NOT NULL CHECK (kind IN ('worker', 'hub')),
  host text NOT NULL,
  pid integer NOT NULL,
  started_at timestamptz NOT NULL,
  state text NOT NULL CHECK (state IN ('starting', 'running', 'waiting', 'failing', 'done', 'stopped')),
  leader boolean NOT NULL DEFAULT false,
  backend_pid integer,
  interval_seconds double precision NOT NULL CHECK (interval_seconds > 0),
  last_success_at timestamptz,
  last_error text,
  last_error_at timestamptz,
  failures integer NOT NULL DEFAULT 0 CHECK (failures >= 0),
  stuck boolean NOT NULL DEFAULT false,
  heartbeat_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (worker_id, loop)
);
COMMENT ON TABLE mycelium.worker_loops IS
  'One row per background loop of each process that runs them, beaten every few seconds (beat_worker).';
CREATE INDEX worker_loops_heartbeat ON mycelium.worker_loops (heartbeat_at);
"""

#: where sql/workers.sql's functions start (everything above that line is the tables, frozen here)
DEFINITIONS_MARK = "-- ---- definitions (CREATE OR REPLACE)"


def _definitions() -> str:
    """The functions of sql/workers.sql: until every upgrade re-applies the definitions in sql/, this
    revision applies its own."""
    text = (sql_dir() / "workers.sql").read_text()
    _, mark, rest = text.partition(DEFINITIONS_MARK)
    if not mark:
        raise RuntimeError(f"sql/workers.sql has no line starting {DEFINITIONS_MARK!r}")
    return mark + rest


def upgrade() -> None:
    drop_sql(op, TABLES)
    drop_sql(op, _definitions())
    run_script(op, (sql_dir() / "grants.sql").read_text())


def downgrade() -> None:
    drop_sql(op, """
      DROP FUNCTION IF EXISTS mycelium.beat_worker(uuid, text, text, integer, timestamptz, jsonb),
        mycelium.stop_worker(uuid), mycelium.worker_report(interval), mycelium.forget_stale_workers(interval),
        mycelium.claim_missing_vectors(integer), mycelium.release_vector_claims(text[], text[]),
        mycelium.vector_claim_key(text, text);
      DROP TABLE IF EXISTS mycelium.worker_loops;
    """)
