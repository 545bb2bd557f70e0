"""Rooms as SLIM group channels: each channel's published position and who is on it

Revision ID: 0015_slim_channels
Revises: 0014_engine_kinds_contract
Create Date: 2026-12-06
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = "0015_slim_channels"
down_revision = "0014_engine_kinds_contract"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_frozen(op, "0015_slim_channels.sql")


def downgrade() -> None:
    run_as_owner(op, "DROP TABLE mycelium.slim_members; DROP TABLE mycelium.slim_channels;")
