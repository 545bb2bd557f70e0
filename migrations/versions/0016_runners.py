"""Runners and their jobs: the hub starts an agent when a message is a turn for it

Revision ID: 0016_runners
Revises: 0015_slim_channels
Create Date: 2026-12-06
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = "0016_runners"
down_revision = "0015_slim_channels"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_frozen(op, "0016_runners.sql")


def downgrade() -> None:
    # (CASCADE: the functions typed by these rows go with them; the older code is then re-applied)
    run_as_owner(op, """
      DROP TRIGGER IF EXISTS t86_messages_wake_runners ON mycelium.messages;
      DROP TABLE IF EXISTS mycelium.runner_jobs, mycelium.runners CASCADE;
      DELETE FROM mycelium.config WHERE name LIKE 'runners.%';
      DELETE FROM mycelium.setting_kinds WHERE name LIKE 'runners.%';
    """)
