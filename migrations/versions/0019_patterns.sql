-- Revision 0019_patterns (frozen): which room was loaded from which pattern, and whether it was
-- started (sql/patterns.sql).
CREATE TABLE mycelium.room_patterns (
  room text PRIMARY KEY REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  pattern text NOT NULL CONSTRAINT pattern_name CHECK (pattern ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
  digest text NOT NULL CONSTRAINT pattern_digest CHECK (digest ~ '^[0-9a-f]{64}$'),
  task text,
  summons jsonb NOT NULL DEFAULT '[]' CONSTRAINT pattern_summons CHECK (jsonb_typeof(summons) = 'array'),
  loaded_by text NOT NULL,
  loaded_at timestamptz NOT NULL DEFAULT now(),
  started_by text,
  started_at timestamptz,
  CONSTRAINT pattern_started_once CHECK ((started_at IS NULL) = (started_by IS NULL))
);
