"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}


# Frozen once released: tables, columns, indexes and data for this revision live in
# ${up_revision}.sql beside this file (the same definitions go into sql/, where a test compares a
# fresh build with the migrated schema); functions, views and triggers need no revision.
def upgrade() -> None:
    apply_frozen(op, "${up_revision}.sql")


def downgrade() -> None:
    run_as_owner(op, """
    """)
