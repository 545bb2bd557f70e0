"""Trust: the auth.gate setting (private rooms are enforced by row-level security once a gated hub
sets it; the policies and guards themselves are code, sql/privacy.sql) and the audit trail of
privileged actions (sql/audit.sql), join codes and the hub's member-token keys (sql/joins.sql)

Revision ID: 0010_trust
Revises: 0009_engines
Create Date: 2026-12-02
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = "0010_trust"
down_revision = "0009_engines"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_frozen(op, "0010_trust.sql")


def downgrade() -> None:
    # the policies and triggers of sql/privacy.sql go first: they use the functions the older code
    # no longer defines (which are then dropped)
    run_as_owner(op, """
      DO $$
      DECLARE t record;
      BEGIN
        FOR t IN SELECT tablename, policyname FROM pg_policies
                 WHERE schemaname = 'mycelium' AND policyname IN ('room_visible', 'auditor_reads')
        LOOP
          EXECUTE format('DROP POLICY %I ON mycelium.%I', t.policyname, t.tablename);
        END LOOP;
        FOR t IN SELECT c.relname, g.tgname FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
                 WHERE c.relnamespace = 'mycelium'::regnamespace
                   AND g.tgname IN ('guard_room_write', 'config_gate_changed')
        LOOP
          EXECUTE format('DROP TRIGGER %I ON mycelium.%I', t.tgname, t.relname);
        END LOOP;
        FOR t IN SELECT relname FROM pg_class
                 WHERE relnamespace = 'mycelium'::regnamespace AND relkind IN ('r', 'p') AND relrowsecurity
        LOOP
          EXECUTE format('ALTER TABLE mycelium.%I DISABLE ROW LEVEL SECURITY', t.relname);
        END LOOP;
      END $$;
      DROP TRIGGER IF EXISTS audit_room_deleted ON mycelium.rooms;
      DROP TRIGGER IF EXISTS audit_setting_written ON mycelium.config;
      DROP TRIGGER IF EXISTS audit_transition_operator ON mycelium.transitions;
      DROP TRIGGER IF EXISTS audit_receipt_key ON mycelium.receipt_keys;
      DROP TRIGGER IF EXISTS audit_forced_release ON mycelium.messages;
      DROP FUNCTION IF EXISTS mycelium.audit_preimage(mycelium.audit_log);
      DROP TABLE mycelium.audit_log;
      DROP FUNCTION IF EXISTS mycelium.ensure_hub_key(text, jsonb, bytea),
        mycelium.rotate_hub_key(text, jsonb, bytea);
      DROP TABLE mycelium.join_codes;
      DROP TABLE mycelium.hub_keys;
      DELETE FROM mycelium.config WHERE name = 'auth.gate';
      DELETE FROM mycelium.setting_kinds WHERE name = 'auth.gate';
    """)
