"""Room names are one name whatever their case or Unicode form; create_task and release_task take more

A unique index on the folded name (``mycelium.room_fold``: NFC, lower case). A database that already
holds two rooms whose names fold to one (``Atlas`` and ``atlas``, or an NFC and an NFD ``café``) is
refused with a message naming them: which one to keep is the operator's call (delete the other, after
``mycelium mirror export`` if its memories matter, or import them into the one kept), then upgrade
again. Rooms created before this revision with names the new rules refuse (format characters, NFD)
are kept as they are; only new names must meet the rules.

Revision ID: 0008_room_names
Revises: 0007_result_text
Create Date: 2026-12-02
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = "0008_room_names"
down_revision = "0007_result_text"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_frozen(op, "0008_room_names.sql")


def downgrade() -> None:
    run_as_owner(op, """
      DROP INDEX IF EXISTS mycelium.rooms_name_folded;
      DROP TRIGGER IF EXISTS rooms_name_rules ON mycelium.rooms;
      DROP FUNCTION IF EXISTS mycelium.room_fold(text);
      DROP FUNCTION IF EXISTS mycelium.create_task(text, text, text, text, text, text, text[]);
      DROP FUNCTION IF EXISTS mycelium.release_task(text, text, text, text, boolean);
    """)
