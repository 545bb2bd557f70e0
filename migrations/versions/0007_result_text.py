"""Transitions keep the result as the caller's JSON text beside the jsonb (a redispatch returns its
keys in their order)

Revision ID: 0007_result_text
Revises: 0006_workers
Create Date: 2026-12-01
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = "0007_result_text"
down_revision = "0006_workers"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_frozen(op, "0007_result_text.sql")


def downgrade() -> None:
    run_as_owner(op, """
      DROP FUNCTION IF EXISTS mycelium.complete(text, text, bigint, jsonb, text);
      ALTER TABLE mycelium.transitions DROP COLUMN IF EXISTS result_text;
    """)
