"""Foundation: roles, rooms, memories with history and thread binding, links, search, outbox.

Revision ID: 0001_foundation
Revises:
Create Date: 2026-11-30
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = "0001_foundation"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_frozen(op, "0001_foundation.sql")


def downgrade() -> None:
    # Roles are cluster-wide and may serve other databases: they stay.
    run_as_owner(op, "DROP SCHEMA IF EXISTS mycelium CASCADE")
