"""Files: a room's uploads, their bytes in blocks, with their size, SHA-256 and content type

Revision ID: 0018_files
Revises: 0017_worker_engine
Create Date: 2026-12-06
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = "0018_files"
down_revision = "0017_worker_engine"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_frozen(op, "0018_files.sql")


def downgrade() -> None:
    run_as_owner(op, """
      DROP TABLE IF EXISTS mycelium.file_blocks CASCADE;
      DROP TABLE IF EXISTS mycelium.files CASCADE;
      DROP SEQUENCE IF EXISTS mycelium.file_uploads;
      DROP FUNCTION IF EXISTS mycelium.file_name_problem(text);
      DELETE FROM mycelium.config WHERE name LIKE 'files.%';
      DELETE FROM mycelium.setting_kinds WHERE name LIKE 'files.%';
    """)
