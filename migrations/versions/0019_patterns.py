"""Patterns: the rooms loaded from a scenario pack, paused until started

Revision ID: 0019_patterns
Revises: 0018_files
Create Date: 2026-12-07
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = "0019_patterns"
down_revision = "0018_files"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_frozen(op, "0019_patterns.sql")


def downgrade() -> None:
    run_as_owner(op, "DROP TABLE IF EXISTS mycelium.room_patterns CASCADE;")
