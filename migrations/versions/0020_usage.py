"""Usage events: model calls, engine turns and runner jobs, what they cost, naming nobody; replicas' clocks

Revision ID: 0020_usage
Revises: 0019_patterns
Create Date: 2026-12-07
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = "0020_usage"
down_revision = "0019_patterns"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_frozen(op, "0020_usage.sql")


def downgrade() -> None:
    # (CASCADE: the triggers and functions that write them go too; the older code is then re-applied)
    run_as_owner(op, """
      ALTER TABLE mycelium.worker_loops DROP COLUMN IF EXISTS clock_skew_seconds;
      DROP TABLE IF EXISTS mycelium.usage_exports CASCADE;
      DROP TABLE IF EXISTS mycelium.usage_events CASCADE;
      DROP FUNCTION IF EXISTS mycelium.usage_attrs_problem(jsonb);
      DROP FUNCTION IF EXISTS mycelium.usage_prohibited_fields();
    """)
