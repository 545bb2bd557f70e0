"""Board: tasks, assignment leases, dependency gate, notices, timeline

Revision ID: 0003_board
Revises: 0002_transitions
Create Date: 2026-11-30
"""

from alembic import op

from mycelium.db.migrate import apply_sql, drop_sql

revision = "0003_board"
down_revision = "0002_transitions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_sql(op, "messages.sql")


def downgrade() -> None:
    drop_sql(op, """
      DROP FUNCTION IF EXISTS mycelium.post_notice(text, text, text, jsonb);
      DROP TABLE IF EXISTS mycelium.messages;
      DROP TABLE IF EXISTS mycelium.message_positions;
      DROP FUNCTION IF EXISTS mycelium.messages_before_insert();
      DROP FUNCTION IF EXISTS mycelium.messages_after_insert();
      DROP FUNCTION IF EXISTS mycelium.live_episode(text);
    """)
