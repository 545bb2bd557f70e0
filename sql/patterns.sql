-- Patterns: a room loaded from a scenario pack (mycelium.patterns reads the pack's folders), paused
-- until it is started.
--
--   * Loading is the writes any client makes (the room, its engines, memories, protocols, runners
--     and task) in one transaction that ends with record_pattern: a refusal anywhere, this file's
--     or another verb's, writes nothing.
--   * A room holds one pattern (the primary key: 409 pattern_loaded for a second).
--   * start_pattern posts the pattern's summons once, under the row's lock: a second start, from
--     this replica or another, is a 409 pattern_started; the summons and the start commit together.

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

-- Record p_room as loaded from pattern p_pattern (its content digest), with the task it filed and
-- the summons start_pattern will post: [{"engine": …, "text": …}], each naming one of the room's
-- engines.
CREATE OR REPLACE FUNCTION mycelium.record_pattern(
  p_room text, p_pattern text, p_digest text, p_task text, p_summons jsonb, p_by text DEFAULT NULL
) RETURNS mycelium.room_patterns LANGUAGE plpgsql AS $$
DECLARE
  by_handle text := mycelium.require_handle(mycelium.author(p_by, 'loaded_by'), 'loaded_by');
  s jsonb;
  r mycelium.room_patterns;
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF jsonb_typeof(coalesce(p_summons, '[]')) <> 'array' THEN
    PERFORM mycelium.refuse(422, 'bad_pattern', 'a pattern''s run is a list of summons');
  END IF;
  FOR s IN SELECT * FROM jsonb_array_elements(coalesce(p_summons, '[]')) LOOP
    IF jsonb_typeof(s -> 'engine') IS DISTINCT FROM 'string' OR jsonb_typeof(s -> 'text') IS DISTINCT FROM 'string'
       OR btrim(s ->> 'text') = '' THEN
      PERFORM mycelium.refuse(422, 'bad_pattern', format('a summon names an engine and a text (got %s)', left(s::text, 200)));
    END IF;
    PERFORM mycelium.require_engine(p_room, s ->> 'engine');
  END LOOP;
  IF EXISTS (SELECT 1 FROM mycelium.room_patterns WHERE room = p_room) THEN
    PERFORM mycelium.refuse(409, 'pattern_loaded', format('room %L holds a pattern already', p_room),
                            jsonb_build_object('room', p_room));
  END IF;
  INSERT INTO mycelium.room_patterns (room, pattern, digest, task, summons, loaded_by)
  VALUES (p_room, p_pattern, lower(p_digest), p_task, coalesce(p_summons, '[]'), by_handle)
  RETURNING * INTO r;
  RETURN r;
END
$$;
COMMENT ON FUNCTION mycelium.record_pattern IS 'public write';

CREATE OR REPLACE FUNCTION mycelium.require_room_pattern(p_room text) RETURNS mycelium.room_patterns
LANGUAGE plpgsql STABLE AS $$
DECLARE r mycelium.room_patterns;
BEGIN
  PERFORM mycelium.require_room(p_room);
  SELECT * INTO r FROM mycelium.room_patterns WHERE room = p_room;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse(404, 'pattern_not_loaded', format('room %L was not loaded from a pattern', p_room),
                            jsonb_build_object('room', p_room));
  END IF;
  RETURN r;
END
$$;
COMMENT ON FUNCTION mycelium.require_room_pattern IS 'public read';

-- Start p_room's pattern: post each summon (on the pattern's task when it filed one: the conductor's
-- coordinate; else the engine invoked in the room) and mark it started, once.
CREATE OR REPLACE FUNCTION mycelium.start_pattern(p_room text, p_by text DEFAULT NULL)
RETURNS mycelium.room_patterns LANGUAGE plpgsql AS $$
DECLARE
  by_handle text := mycelium.require_handle(mycelium.author(p_by, 'started_by'), 'started_by');
  r mycelium.room_patterns := mycelium.require_room_pattern(p_room);
  s jsonb;
BEGIN
  SELECT * INTO r FROM mycelium.room_patterns WHERE room = p_room FOR UPDATE;
  IF r.started_at IS NOT NULL THEN
    PERFORM mycelium.refuse(409, 'pattern_started',
      format('pattern %L in room %L was started already, by @%s at %s', r.pattern, p_room, r.started_by,
             to_char(r.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS"Z"')),
      jsonb_build_object('room', p_room, 'started_by', r.started_by, 'started_at', r.started_at));
  END IF;
  FOR s IN SELECT * FROM jsonb_array_elements(r.summons) LOOP
    IF r.task IS NOT NULL THEN
      PERFORM mycelium.coordinate(p_room, r.task, s ->> 'engine', s ->> 'text', by_handle);
    ELSE
      PERFORM mycelium.invoke_engine(p_room, s ->> 'engine', s ->> 'text', NULL, by_handle);
    END IF;
  END LOOP;
  UPDATE mycelium.room_patterns SET started_by = by_handle, started_at = now() WHERE room = p_room
  RETURNING * INTO r;
  RETURN r;
END
$$;
COMMENT ON FUNCTION mycelium.start_pattern IS 'public write';
