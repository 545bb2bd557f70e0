"""Room names are one name whatever their case or Unicode form; create_task and release_task take more

Revision ID: 0008_room_names
Revises: 0007_result_text
Create Date: 2026-12-02
"""

from alembic import op

from mycelium.db.migrate import run_as_owner

revision = "0008_room_names"
down_revision = "0007_result_text"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_as_owner(op, """
      -- create_task takes depends-on too (sql/board.sql): its six-argument form goes
      DROP FUNCTION IF EXISTS mycelium.create_task(text, text, text, text, text, text);
      -- release_task takes force (sql/assignments.sql): its four-argument form goes
      DROP FUNCTION IF EXISTS mycelium.release_task(text, text, text, text);
    """)


def downgrade() -> None:
    run_as_owner(op, """
      DROP FUNCTION IF EXISTS mycelium.create_task(text, text, text, text, text, text, text[]);
      DROP FUNCTION IF EXISTS mycelium.release_task(text, text, text, text, boolean);
    """)
