"""The worker engine: summons by board notices, one completion per parent, swarms, worker settings

Revision ID: 0017_worker_engine
Revises: 0016_runners
Create Date: 2026-12-06
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = "0017_worker_engine"
down_revision = "0016_runners"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_frozen(op, "0017_worker_engine.sql")


def downgrade() -> None:
    # (CASCADE: the functions typed by these rows go with them; the older code is then re-applied)
    run_as_owner(op, """
      DROP TABLE IF EXISTS mycelium.swarms CASCADE;
      DELETE FROM mycelium.engine_summons WHERE how IN ('filed', 'completed');
      DROP INDEX IF EXISTS mycelium.engine_summons_one_completion;
      ALTER TABLE mycelium.engine_summons DROP COLUMN IF EXISTS row_key;
      ALTER TABLE mycelium.engine_summons DROP CONSTRAINT summon_how;
      ALTER TABLE mycelium.engine_summons ADD CONSTRAINT summon_how CHECK (how IN ('mention', 'addressed'));
      DELETE FROM mycelium.config WHERE name LIKE 'workers.%';
      DELETE FROM mycelium.setting_kinds WHERE name LIKE 'workers.%';
    """)
