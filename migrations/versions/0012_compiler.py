"""The task compiler: a compile job for every run that converged with an agreement, enqueued by the
database in the transaction that closes the run, and the work/ rows each job filed (sql/compiler.sql)

Revision ID: 0012_compiler
Revises: 0011_engine_kinds
Create Date: 2026-12-02
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = "0012_compiler"
down_revision = "0011_engine_kinds"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_frozen(op, "0012_compiler.sql")


def downgrade() -> None:
    # the functions typed by the tables go with them (the older code is then re-applied)
    run_as_owner(op, """
      DROP TRIGGER IF EXISTS engine_runs_compile_inserted ON mycelium.engine_runs;
      DROP TRIGGER IF EXISTS engine_runs_compile_converged ON mycelium.engine_runs;
      DROP TABLE IF EXISTS mycelium.compiled_tasks, mycelium.compile_jobs CASCADE;
    """)
