-- Revision 0021_events (frozen): memory subscriptions and each handle's events across its rooms
-- (sql/events.sql).
CREATE TABLE mycelium.memory_subscriptions (
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  handle text NOT NULL,
  prefix text NOT NULL CONSTRAINT subscription_prefix CHECK (octet_length(prefix) <= 512),
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, handle, prefix)
);

CREATE TABLE mycelium.handle_events (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  handle text NOT NULL,
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  kind text NOT NULL CONSTRAINT handle_event_kind CHECK (kind IN ('message', 'memory')),
  position bigint,
  key text,
  version integer,
  op text,
  prefix text,
  at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT handle_event_shape CHECK (
    (kind = 'message' AND position IS NOT NULL AND key IS NULL)
    OR (kind = 'memory' AND key IS NOT NULL AND version IS NOT NULL AND op IN ('write', 'delete')))
);
CREATE INDEX handle_events_by_handle ON mycelium.handle_events (handle, id);
CREATE INDEX handle_events_at ON mycelium.handle_events (at);
