"""Transition ledger: transitions, gates, leases, receipts (issue: transition ledger)

Revision ID: 0002_transitions
Revises: 0001_foundation
Create Date: 2026-11-30
"""

from alembic import op

from mycelium.db.migrate import apply_sql, drop_sql

revision = "0002_transitions"
down_revision = "0001_foundation"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_sql(op)


def downgrade() -> None:
    drop_sql(op, "SELECT 1")
