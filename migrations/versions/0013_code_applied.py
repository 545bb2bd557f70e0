"""The code a migration applied last: a hub that starts on a database whose code is already its own
applies nothing (sql/catalogue.sql, mycelium.db.schema.code_is_current)

Revision ID: 0013_code_applied
Revises: 0012_compiler
Create Date: 2026-12-05
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = "0013_code_applied"
down_revision = "0012_compiler"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_frozen(op, "0013_code_applied.sql")


def downgrade() -> None:
    run_as_owner(op, "DROP TABLE IF EXISTS mycelium.code_applied;")
