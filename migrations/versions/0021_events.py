"""Events: memory subscriptions, and each handle's events across its rooms (GET /api/events)

Revision ID: 0021_events
Revises: 0020_usage
Create Date: 2026-12-07
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = "0021_events"
down_revision = "0020_usage"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_frozen(op, "0021_events.sql")


def downgrade() -> None:
    # (CASCADE: the triggers and functions that write them go too; the older code is then re-applied)
    run_as_owner(op, """
      DROP TABLE IF EXISTS mycelium.handle_events CASCADE;
      DROP TABLE IF EXISTS mycelium.memory_subscriptions CASCADE;
    """)
