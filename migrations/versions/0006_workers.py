"""Workers: the heartbeat table of every process that runs background loops

Revision ID: 0006_workers
Revises: 0005_settings
Create Date: 2026-12-01
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = "0006_workers"
down_revision = "0005_settings"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_frozen(op, "0006_workers.sql")


def downgrade() -> None:
    run_as_owner(op, """
      DROP FUNCTION IF EXISTS mycelium.beat_worker(uuid, text, text, integer, timestamptz, jsonb),
        mycelium.stop_worker(uuid), mycelium.worker_report(interval), mycelium.forget_stale_workers(interval),
        mycelium.claim_missing_vectors(integer), mycelium.release_vector_claims(text[], text[]),
        mycelium.vector_claim_key(text, text);
      DROP TABLE IF EXISTS mycelium.worker_loops;
    """)
