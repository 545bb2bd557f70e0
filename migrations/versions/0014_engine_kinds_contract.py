"""The engines table's kind CHECK names mycelium.engine_kinds(), which reads the set from
contracts/vocabulary.json, so the kinds are written once

Revision ID: 0014_engine_kinds_contract
Revises: 0013_code_applied
Create Date: 2026-12-05
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = "0014_engine_kinds_contract"
down_revision = "0013_code_applied"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_frozen(op, "0014_engine_kinds_contract.sql")


def downgrade() -> None:
    run_as_owner(op, """
ALTER TABLE mycelium.engines DROP CONSTRAINT engine_kind_known;
ALTER TABLE mycelium.engines ADD CONSTRAINT engine_kind_known
  CHECK (kind IN ('conductor', 'persona', 'aligner', 'synthesizer'));
""")
