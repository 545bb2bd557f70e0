-- A handle's events across its rooms: what GET /api/events streams, one global order to resume by.
--
--   * A message that is a turn for a handle (its wakes: a mention, an addressed message) is an
--     event of that handle (t87, in the message's own transaction).
--   * A handle subscribes to a memory prefix in a room (memory_subscriptions); every version written
--     or deleted under that prefix is an event of each subscriber but its author (t80).
--   * Each event row NOTIFYs mycelium_events with the handle, after the commit: a stream re-reads
--     the table by id (a lost hint costs the stream's periodic look, never the event).
--   * Events older than a week are pruned (prune_handle_events, by the sweeper's leader).

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

-- p_handle follows the memories of p_room under p_prefix ('' : all of them); subscribing twice is
-- one subscription.
CREATE OR REPLACE FUNCTION mycelium.subscribe_memory(p_room text, p_handle text, p_prefix text DEFAULT '')
RETURNS mycelium.memory_subscriptions LANGUAGE plpgsql AS $$
DECLARE
  h text := mycelium.require_handle(p_handle, 'handle');
  r mycelium.memory_subscriptions;
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF octet_length(coalesce(p_prefix, '')) > 512 THEN
    PERFORM mycelium.refuse(422, 'bad_prefix', 'a memory prefix is at most 512 bytes', jsonb_build_object('field', 'prefix'));
  END IF;
  INSERT INTO mycelium.memory_subscriptions (room, handle, prefix) VALUES (p_room, h, coalesce(p_prefix, ''))
  ON CONFLICT (room, handle, prefix) DO UPDATE SET prefix = excluded.prefix
  RETURNING * INTO r;
  RETURN r;
END
$$;
COMMENT ON FUNCTION mycelium.subscribe_memory IS 'public write';

CREATE OR REPLACE FUNCTION mycelium.unsubscribe_memory(p_room text, p_handle text, p_prefix text DEFAULT '')
RETURNS mycelium.memory_subscriptions LANGUAGE plpgsql AS $$
DECLARE
  h text := mycelium.require_handle(p_handle, 'handle');
  r mycelium.memory_subscriptions;
BEGIN
  PERFORM mycelium.require_room(p_room);
  DELETE FROM mycelium.memory_subscriptions WHERE room = p_room AND handle = h AND prefix = coalesce(p_prefix, '')
  RETURNING * INTO r;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse(404, 'subscription_not_found',
      format('@%s does not follow %L in room %L', h, coalesce(p_prefix, ''), p_room),
      jsonb_build_object('room', p_room, 'handle', h, 'prefix', coalesce(p_prefix, '')));
  END IF;
  RETURN r;
END
$$;
COMMENT ON FUNCTION mycelium.unsubscribe_memory IS 'public write';

-- A message's wakes are its handles' events.
CREATE OR REPLACE FUNCTION mycelium.message_events() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE h text;
BEGIN
  IF cardinality(NEW.wakes) = 0 THEN
    RETURN NULL;
  END IF;
  FOREACH h IN ARRAY NEW.wakes LOOP
    INSERT INTO mycelium.handle_events (handle, room, kind, position) VALUES (h, NEW.room, 'message', NEW.position);
    PERFORM pg_notify('mycelium_events', h);
  END LOOP;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER t87_messages_handle_events AFTER INSERT ON mycelium.messages
  FOR EACH ROW EXECUTE FUNCTION mycelium.message_events();

-- A memory version is an event of every subscriber to a prefix of its key (not of its author).
CREATE OR REPLACE FUNCTION mycelium.memory_events() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE s record;
BEGIN
  FOR s IN SELECT DISTINCT ON (x.handle) x.handle, x.prefix FROM mycelium.memory_subscriptions x
           WHERE x.room = NEW.room AND starts_with(NEW.key, x.prefix)
             AND x.handle <> mycelium.normalize_handle(NEW.written_by)
           ORDER BY x.handle, length(x.prefix) DESC LOOP
    INSERT INTO mycelium.handle_events (handle, room, kind, key, version, op, prefix)
    VALUES (s.handle, NEW.room, 'memory', NEW.key, NEW.version, NEW.op, s.prefix);
    PERFORM pg_notify('mycelium_events', s.handle);
  END LOOP;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER t80_memory_versions_handle_events AFTER INSERT ON mycelium.memory_versions
  FOR EACH ROW EXECUTE FUNCTION mycelium.memory_events();

-- Forget events older than p_older_than; how many went.
CREATE OR REPLACE FUNCTION mycelium.prune_handle_events(p_older_than interval DEFAULT '7 days')
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE n integer;
BEGIN
  DELETE FROM mycelium.handle_events WHERE at < now() - p_older_than;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$$;
COMMENT ON FUNCTION mycelium.prune_handle_events IS 'public write';
