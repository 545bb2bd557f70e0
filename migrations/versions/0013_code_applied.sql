-- Revision 0013_code_applied (frozen): the code a migration applied last (sql/catalogue.sql).
CREATE TABLE mycelium.code_applied (
  only_row boolean PRIMARY KEY DEFAULT true CONSTRAINT code_applied_one_row CHECK (only_row),
  code_digest text NOT NULL CONSTRAINT code_applied_digest_shape CHECK (code_digest ~ '^[0-9a-f]{64}$'),
  fingerprint text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE mycelium.code_applied IS
  'The code the last migration applied: its digest and mycelium.code_fingerprint() right after.';
