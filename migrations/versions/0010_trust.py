"""Trust: the auth.gate setting (private rooms are enforced by row-level security once a gated hub
sets it; the policies and guards themselves are code, sql/privacy.sql) and the audit trail of
privileged actions (sql/audit.sql), join codes and the hub's member-token keys (sql/joins.sql)

Revision ID: 0010_trust
Revises: 0009_engines
Create Date: 2026-12-02
"""

from alembic import op

from mycelium.db.migrate import run_as_owner

revision = "0010_trust"
down_revision = "0009_engines"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_as_owner(op, r"""
      INSERT INTO mycelium.setting_kinds (name, value_type, default_value, min_value, max_value, description)
      VALUES ('auth.gate', 'boolean', 'false', NULL, NULL,
              'The token gate is on: a private room is seen only by its owner, its members and operators.');
      CREATE TABLE mycelium.audit_log (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        at timestamptz NOT NULL DEFAULT clock_timestamp(),
        action text NOT NULL CONSTRAINT audit_action_shape CHECK (action ~ '^[a-z_]+\.[a-z_]+$'),
        actor text,
        actor_kind text,
        principal text,
        principal_role text,
        room text,
        target text,
        detail jsonb NOT NULL DEFAULT '{}',
        prev_hash bytea,
        hash bytea NOT NULL CONSTRAINT audit_hash_length CHECK (length(hash) = 32)
      );
      COMMENT ON TABLE mycelium.audit_log IS
        'Privileged actions, append-only and hash-chained (verify_audit_chain()).';
      CREATE TABLE mycelium.join_codes (
        code_hash bytea PRIMARY KEY CONSTRAINT join_code_hash_length CHECK (length(code_hash) = 32),
        room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
        handle text NOT NULL,
        created_by text,
        created_at timestamptz NOT NULL DEFAULT now(),
        expires_at timestamptz NOT NULL,
        redeemed_at timestamptz,
        redeemed_by text
      );
      COMMENT ON TABLE mycelium.join_codes IS
        'Single-use join codes by SHA-256 (the code is never stored): room, handle, expiry, redemption.';

      CREATE TABLE mycelium.hub_keys (
        kid text PRIMARY KEY CONSTRAINT hub_key_id_shape CHECK (kid ~ '^[0-9a-f]{16}$'),
        public_jwk jsonb NOT NULL,
        sealed_private bytea NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        retired_at timestamptz
      );
      COMMENT ON TABLE mycelium.hub_keys IS
        'The hub''s member-token signing keys: public JWK, private key sealed under the hub''s secret.';
    """)


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
