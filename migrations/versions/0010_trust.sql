-- Revision 0010_trust (frozen): Trust: the auth.gate setting (private rooms are enforced by row-level security once a gated hub sets it; the policies and guards themselves are code, sql/privacy.sql) and the audit trail of privileged actions (sql/audit.sql), join codes and the hub's member-token keys (sql/joins.sql)
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
