-- Hub settings: the closed catalogue of what mycelium.config may hold, with each setting's type,
-- default and bounds, and the verbs that read and write them. The catalogue is enforced on the
-- config table itself, so a setting written from psql is checked exactly like one written by the
-- hub: an unknown name or a value of the wrong type never lands.

CREATE TABLE mycelium.setting_kinds (
  name text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_.]{0,63}$'),
  value_type text NOT NULL CHECK (value_type IN ('boolean', 'number')),
  default_value jsonb NOT NULL,
  min_value double precision,
  max_value double precision,
  description text NOT NULL CHECK (btrim(description) <> ''),
  CHECK (jsonb_typeof(default_value) = value_type),
  CHECK (value_type = 'number' OR (min_value IS NULL AND max_value IS NULL))
);
COMMENT ON TABLE mycelium.setting_kinds IS
  'The settings mycelium.config may hold: type, default, bounds. A room row overrides the hub row.';

INSERT INTO mycelium.setting_kinds (name, value_type, default_value, min_value, max_value, description) VALUES
  ('board.dependency_gate', 'boolean', 'false', NULL, NULL,
   'A claim is refused while the row waits on unsettled board rows (force overrides).'),
  ('presence.ttl_seconds', 'number', '90', 1, 86400,
   'How long a handle stays present after its last await, in seconds.'),
  ('auth.gate', 'boolean', 'false', NULL, NULL,
   'The token gate is on: a private room is seen only by its owner, its members and operators.'),
  ('runners.wake_grace_seconds', 'number', '1', 0, 600,
   'How long a wake of a present handle waits for one of its processes to take the message before its runner starts one.'),
  ('runners.pause_after', 'number', '5', 1, 1000,
   'A runner whose jobs failed this many times in a row pauses until an operator resumes it.'),
  ('workers.timeout_seconds', 'number', '600', 1, 86400,
   'How long one turn of a worker engine''s agent command may run before it is stopped and counted as failed.'),
  ('workers.max_turns_per_room', 'number', '50', 1, 100000,
   'How many turns a worker engine takes in one room; past it, a summon is answered with a refusal.'),
  ('workers.tools', 'boolean', 'true', NULL, NULL,
   'A worker engine runs its agent command in its worktree; off, it is write-only: the hub''s model answers, nothing runs.'),
  ('files.max_bytes', 'number', '268435456', 0, 1099511627776,
   'The largest file a room takes, in bytes; a bigger upload is refused (413) and nothing of it is stored.');

-- Why a value does not fit a setting, or NULL when it does.
CREATE OR REPLACE FUNCTION mycelium.setting_problem(k mycelium.setting_kinds, p_value jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN jsonb_typeof(p_value) IS DISTINCT FROM k.value_type
      THEN format('%s takes a %s, not %s', k.name, k.value_type, coalesce(p_value::text, 'nothing'))
    WHEN k.min_value IS NOT NULL AND (p_value #>> '{}')::double precision < k.min_value
      THEN format('%s is at least %s', k.name, k.min_value)
    WHEN k.max_value IS NOT NULL AND (p_value #>> '{}')::double precision > k.max_value
      THEN format('%s is at most %s', k.name, k.max_value)
  END
$$;

-- Like require_room: refuse (404, naming the known settings) a name the catalogue does not hold.
CREATE OR REPLACE FUNCTION mycelium.require_setting(p_name text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM mycelium.setting_kinds WHERE name = p_name) THEN
    PERFORM mycelium.refuse(404, 'unknown_setting',
      format('there is no setting %L (known: %s)', p_name,
             (SELECT string_agg(name, ', ' ORDER BY name) FROM mycelium.setting_kinds)),
      jsonb_build_object('name', p_name,
                         'known', (SELECT jsonb_agg(name ORDER BY name) FROM mycelium.setting_kinds)));
  END IF;
END
$$;

-- Every config row names a known setting, in a room that exists, and holds a value that fits it
-- (psql included; write_setting relies on this check for what it writes).
CREATE OR REPLACE FUNCTION mycelium.config_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  k mycelium.setting_kinds;
  problem text;
BEGIN
  SELECT * INTO k FROM mycelium.setting_kinds WHERE name = NEW.name;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse(422, 'unknown_setting', format('there is no setting %L', NEW.name),
                            jsonb_build_object('name', NEW.name));
  END IF;
  IF NEW.room <> '' THEN
    PERFORM mycelium.require_room(NEW.room);
  END IF;
  problem := mycelium.setting_problem(k, NEW.value);
  IF problem IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'invalid_setting', problem,
                            jsonb_build_object('name', NEW.name, 'value', NEW.value, 'type', k.value_type));
  END IF;
  RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER t10_config_check BEFORE INSERT OR UPDATE ON mycelium.config
  FOR EACH ROW EXECUTE FUNCTION mycelium.config_check();

-- The settings as they apply to one room ('' = hub-wide): the value in force and where it comes
-- from (room, hub or default), with the hub-wide and the room's own values beside it.
CREATE TYPE mycelium.setting AS (
  name text, value jsonb, source text, hub_value jsonb, room_value jsonb, value_type text,
  default_value jsonb, min_value double precision, max_value double precision, description text,
  updated_by text, updated_at timestamptz
);

CREATE OR REPLACE FUNCTION mycelium.settings_of(p_room text DEFAULT '') RETURNS SETOF mycelium.setting
LANGUAGE sql STABLE AS $$
  SELECT k.name,
         coalesce(r.value, h.value, k.default_value),
         CASE WHEN r.value IS NOT NULL THEN 'room' WHEN h.value IS NOT NULL THEN 'hub' ELSE 'default' END,
         h.value, r.value, k.value_type, k.default_value, k.min_value, k.max_value, k.description,
         coalesce(r.updated_by, h.updated_by), coalesce(r.updated_at, h.updated_at)
  FROM mycelium.setting_kinds k
  LEFT JOIN mycelium.config h ON h.room = '' AND h.name = k.name
  LEFT JOIN mycelium.config r ON coalesce(p_room, '') <> '' AND r.room = p_room AND r.name = k.name
  ORDER BY k.name
$$;
COMMENT ON FUNCTION mycelium.settings_of IS 'public read';

-- Write one setting for a room, or hub-wide with p_room '' or NULL; a NULL value clears it (the
-- room then follows the hub, the hub its default). Returns the setting as it now applies there.
CREATE OR REPLACE FUNCTION mycelium.write_setting(p_name text, p_value jsonb, p_room text DEFAULT '', p_by text DEFAULT NULL)
RETURNS SETOF mycelium.setting LANGUAGE plpgsql AS $$
DECLARE
  room text := coalesce(p_room, '');
BEGIN
  PERFORM mycelium.operator_only('write_setting');
  PERFORM mycelium.require_setting(p_name);
  -- a write's room and value are checked by the config table's trigger; a clear deletes, which
  -- that trigger never sees
  IF room <> '' AND (p_value IS NULL OR p_value = 'null'::jsonb) THEN
    PERFORM mycelium.require_room(room);
  END IF;
  PERFORM mycelium.set_config(p_name, nullif(p_value, 'null'::jsonb), room, mycelium.author(p_by));
  RETURN QUERY SELECT * FROM mycelium.settings_of(room) s WHERE s.name = p_name;
END
$$;
COMMENT ON FUNCTION mycelium.write_setting IS 'public write';
