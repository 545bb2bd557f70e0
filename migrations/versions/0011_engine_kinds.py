"""Two more engine kinds, the aligner (negotiations on NEGMAS) and the synthesizer (a room's
transcript distilled into memory), and the agreement a converged run carries (engine_runs.assignments)

Revision ID: 0011_engine_kinds
Revises: 0010_trust
Create Date: 2026-12-02
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = "0011_engine_kinds"
down_revision = "0010_trust"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_frozen(op, "0011_engine_kinds.sql")


def downgrade() -> None:
    run_as_owner(op, """
      DELETE FROM mycelium.engines WHERE kind IN ('aligner', 'synthesizer');
      ALTER TABLE mycelium.engine_runs DROP COLUMN IF EXISTS assignments;
      ALTER TABLE mycelium.engines DROP CONSTRAINT engine_kind_known;
      ALTER TABLE mycelium.engines ADD CONSTRAINT engine_kind_known CHECK (kind IN ('conductor', 'persona'));
    """)
