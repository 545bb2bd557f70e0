"""Settings: the closed catalogue of hub and room settings, checked on every config write

Revision ID: 0005_settings
Revises: 0004_conversations
Create Date: 2026-11-30
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = "0005_settings"
down_revision = "0004_conversations"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_frozen(op, "0005_settings.sql")


def downgrade() -> None:
    run_as_owner(op, """
      DROP FUNCTION IF EXISTS mycelium.schema_fingerprint(), mycelium.schema_catalogue();
      DROP TRIGGER IF EXISTS config_check ON mycelium.config;
      DROP FUNCTION IF EXISTS mycelium.write_setting(text, jsonb, text, text), mycelium.settings_of(text),
        mycelium.config_check(), mycelium.require_setting(text),
        mycelium.setting_problem(mycelium.setting_kinds, jsonb);
      DROP TYPE IF EXISTS mycelium.setting;
      DROP TABLE IF EXISTS mycelium.setting_kinds;
    """)
