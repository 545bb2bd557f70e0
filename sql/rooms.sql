-- Rooms: the persistent namespace that holds memories, the board and the timeline.
-- Every room-scoped table keys on the room first and cascades from here, so deleting a room
-- removes everything of it in one statement.

CREATE OR REPLACE FUNCTION mycelium.room_name_problem(p_name text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN p_name IS NULL OR btrim(p_name) = '' THEN 'a room name must not be blank'
    WHEN length(p_name) > 100 THEN 'a room name has at most 100 characters'
    WHEN p_name IN ('.', '..') THEN 'a room name must not be "." or ".."'
    WHEN p_name ~ '[/\\]' THEN 'a room name must not contain a path separator'
    WHEN p_name ~ '[[:cntrl:]]' THEN 'a room name must not contain control characters'
    WHEN p_name LIKE '%:session:%' THEN 'a room name must not contain ":session:"'
  END
$$;

-- The characters of Unicode category Cf (format: zero-width spaces and joiners, bidirectional
-- controls and isolates, the soft hyphen, the BOM, tag characters …), as of Unicode 15.1: invisible,
-- so two names that look the same would be two rooms. A regular-expression bracket expression.
CREATE OR REPLACE FUNCTION mycelium.format_characters() RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT '[\u00AD\u0600-\u0605\u061C\u06DD\u070F\u0890-\u0891\u08E2\u180E\u200B-\u200F\u202A-\u202E'
         '\u2060-\u2064\u2066-\u206F\uFEFF\uFFF9-\uFFFB\U000110BD\U000110CD\U00013430-\U0001343F'
         '\U0001BCA0-\U0001BCA3\U0001D173-\U0001D17A\U000E0001\U000E0020-\U000E007F]'
$$;

-- What a new room's name must also meet (the table's check keeps the older rules, so a room created
-- before these is still updated and deleted as it was): no format characters, NFC form.
CREATE OR REPLACE FUNCTION mycelium.room_name_form_problem(p_name text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN p_name ~ mycelium.format_characters() THEN
      format('a room name must not contain invisible or bidirectional-control characters (U+%s)',
             upper(lpad(to_hex(ascii(substring(p_name FROM mycelium.format_characters()))), 4, '0')))
    WHEN p_name IS NOT NFC NORMALIZED THEN 'a room name is written in Unicode NFC form'
  END
$$;

-- A room name as it is compared: NFC, lower case by Unicode's rules (with the first Unicode-aware
-- collation the server has, as link_slug; without one, ASCII letters only). `Atlas`, `ATLAS` and
-- an NFD `atlas` are one name; the spelling a room was created with is what it is stored and shown as.
-- (A unique index is built on it: migrations/versions/0008_room_names.py defines it the same way.)
DO $fold$
DECLARE
  coll text;
BEGIN
  SELECT format('COLLATE %I.%I', n.nspname, c.collname) INTO coll
  FROM pg_collation c JOIN pg_namespace n ON n.oid = c.collnamespace
  WHERE c.collname IN ('pg_c_utf8', 'C.utf8', 'C.UTF-8')
    AND c.collencoding IN (-1, (SELECT encoding FROM pg_database WHERE datname = current_database()))
  ORDER BY array_position(ARRAY['pg_c_utf8', 'C.utf8', 'C.UTF-8'], c.collname::text)
  LIMIT 1;
  EXECUTE format($fn$
    CREATE OR REPLACE FUNCTION mycelium.room_fold(p_name text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT lower(normalize(p_name, NFC) %s) $$ $fn$,
    coalesce(coll, ''));
END
$fold$;
COMMENT ON FUNCTION mycelium.room_fold IS 'public read';

CREATE TABLE mycelium.rooms (
  name text PRIMARY KEY CONSTRAINT room_name_valid CHECK (mycelium.room_name_problem(name) IS NULL),
  title text CONSTRAINT room_title_length CHECK (length(title) <= 200),
  description text CONSTRAINT room_description_length CHECK (length(description) <= 500),
  is_public boolean NOT NULL DEFAULT true,
  owner text,
  members text[] NOT NULL DEFAULT '{}',
  created_by text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT private_room_has_owner CHECK (is_public OR owner IS NOT NULL)
);
CREATE UNIQUE INDEX rooms_name_folded ON mycelium.rooms (mycelium.room_fold(name));

-- A new room (psql's INSERT too): its name in NFC, meeting room_name_form_problem (the check
-- constraint the rest), and no other spelling of it taken (409 naming that room; two inserts racing
-- meet the unique index).
CREATE OR REPLACE FUNCTION mycelium.rooms_name_rules() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  problem text;
  existing text;
BEGIN
  NEW.name := normalize(NEW.name, NFC);
  problem := mycelium.room_name_form_problem(NEW.name);
  IF problem IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'invalid_room_name', problem, jsonb_build_object('name', NEW.name));
  END IF;
  SELECT name INTO existing FROM mycelium.rooms WHERE mycelium.room_fold(name) = mycelium.room_fold(NEW.name);
  IF FOUND THEN
    PERFORM mycelium.room_exists(NEW.name, existing);
  END IF;
  RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER t60_rooms_name_rules BEFORE INSERT ON mycelium.rooms
  FOR EACH ROW EXECUTE FUNCTION mycelium.rooms_name_rules();

CREATE OR REPLACE FUNCTION mycelium.room_exists(p_name text, p_existing text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.refuse(409, 'room_exists',
    CASE WHEN p_existing = p_name THEN format('Room %L already exists', p_name)
         ELSE format('Room %L already exists, spelled %L (room names are one name whatever their case)',
                     p_name, p_existing) END,
    jsonb_build_object('name', p_name)
    || CASE WHEN p_existing = p_name THEN '{}' ELSE jsonb_build_object('existing', p_existing) END);
END
$$;

-- 404 unless the room exists by this exact name. When it exists under another spelling (case,
-- Unicode form), the refusal names it (detail `spelled`): the HTTP layer then retries with it, and
-- psql users learn how to write it.
CREATE OR REPLACE FUNCTION mycelium.require_room(p_room text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
  spelled text;
BEGIN
  -- a room the principal may not see is answered as one that does not exist (sql/privacy.sql)
  IF NOT EXISTS (SELECT 1 FROM mycelium.rooms WHERE name = p_room) OR NOT mycelium.room_visible(p_room) THEN
    SELECT name INTO spelled FROM mycelium.rooms
    WHERE mycelium.room_fold(name) = mycelium.room_fold(p_room) AND name <> p_room AND mycelium.room_visible(name);
    IF FOUND THEN
      PERFORM mycelium.refuse(404, 'room_not_found',
        format('Room %L not found: it is spelled %L (write it so here)', p_room, spelled),
        jsonb_build_object('room', p_room, 'spelled', spelled));
    END IF;
    PERFORM mycelium.refuse(404, 'room_not_found', format('Room %L not found', p_room),
                            jsonb_build_object('room', p_room));
  END IF;
END
$$;

-- For a read of a room's rows: true, or 404 room_not_found. A query names it in its WHERE clause
-- with nothing but the room's parameter, which makes it a one-time filter: checked once, in the
-- read's own statement, before any row is read.
CREATE OR REPLACE FUNCTION mycelium.room_known(p_room text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  PERFORM mycelium.require_room(p_room);
  RETURN true;
END
$$;
COMMENT ON FUNCTION mycelium.room_known IS 'public read';

CREATE OR REPLACE FUNCTION mycelium.create_room(
  p_name text, p_title text DEFAULT NULL, p_description text DEFAULT NULL,
  p_is_public boolean DEFAULT true, p_owner text DEFAULT NULL, p_members text[] DEFAULT '{}',
  p_created_by text DEFAULT NULL
) RETURNS mycelium.rooms LANGUAGE plpgsql AS $$
DECLARE
  v_name text := normalize(p_name, NFC);
  problem text := coalesce(mycelium.room_name_problem(v_name), mycelium.room_name_form_problem(v_name));
  creator text := mycelium.author(p_created_by, 'created_by');
  r mycelium.rooms;
BEGIN
  IF problem IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'invalid_room_name', problem, jsonb_build_object('name', p_name));
  END IF;
  IF NOT coalesce(p_is_public, true) AND coalesce(p_owner, creator) IS NULL THEN
    PERFORM mycelium.refuse(422, 'private_room_needs_owner', 'a private room needs an owner');
  END IF;
  INSERT INTO mycelium.rooms (name, title, description, is_public, owner, members, created_by)
  VALUES (v_name, p_title, p_description, coalesce(p_is_public, true),
          CASE WHEN coalesce(p_is_public, true) THEN p_owner ELSE coalesce(p_owner, creator) END,
          coalesce(p_members, '{}'), creator)
  ON CONFLICT DO NOTHING  -- this name or another spelling of it, created meanwhile
  RETURNING * INTO r;
  IF r.name IS NULL THEN
    PERFORM mycelium.room_exists(v_name, (SELECT name FROM mycelium.rooms
                                          WHERE mycelium.room_fold(name) = mycelium.room_fold(v_name)));
  END IF;
  RETURN r;
END
$$;
COMMENT ON FUNCTION mycelium.create_room IS 'public write';

-- PATCH semantics: only the keys present in p_patch change (title, description, is_public,
-- members, owner). Making a room private without an owner makes its author (the actor, else p_by)
-- its owner.
CREATE OR REPLACE FUNCTION mycelium.update_room(p_name text, p_patch jsonb, p_by text DEFAULT NULL)
RETURNS mycelium.rooms LANGUAGE plpgsql AS $$
DECLARE
  by_handle text := mycelium.author(p_by, 'by');
  r mycelium.rooms;
  unknown text[];
BEGIN
  SELECT array_agg(k) INTO unknown FROM jsonb_object_keys(coalesce(p_patch, '{}')) k
  WHERE k NOT IN ('title', 'description', 'is_public', 'members', 'owner');
  IF unknown IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'unknown_fields', 'a room has no field ' || array_to_string(unknown, ', '),
                            jsonb_build_object('fields', unknown));
  END IF;
  SELECT * INTO r FROM mycelium.rooms WHERE name = p_name FOR UPDATE;
  IF NOT FOUND THEN PERFORM mycelium.require_room(p_name); END IF;
  IF p_patch ? 'title' THEN r.title := p_patch->>'title'; END IF;
  IF p_patch ? 'description' THEN r.description := p_patch->>'description'; END IF;
  IF p_patch ? 'owner' THEN r.owner := p_patch->>'owner'; END IF;
  IF p_patch ? 'members' THEN
    r.members := coalesce(ARRAY(SELECT jsonb_array_elements_text(p_patch->'members')), '{}');
  END IF;
  IF p_patch ? 'is_public' AND jsonb_typeof(p_patch->'is_public') = 'boolean' THEN
    r.is_public := (p_patch->>'is_public')::boolean;
  END IF;
  IF NOT r.is_public AND r.owner IS NULL THEN
    IF by_handle IS NULL THEN
      PERFORM mycelium.refuse(422, 'private_room_needs_owner', 'a private room needs an owner');
    END IF;
    r.owner := by_handle;
  END IF;
  UPDATE mycelium.rooms SET title = r.title, description = r.description, is_public = r.is_public,
         owner = r.owner, members = r.members, updated_at = now()
  WHERE name = p_name RETURNING * INTO r;
  RETURN r;
END
$$;
COMMENT ON FUNCTION mycelium.update_room IS 'public write';

CREATE OR REPLACE FUNCTION mycelium.delete_room(p_name text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.operator_only('delete_room');
  DELETE FROM mycelium.rooms WHERE name = p_name;
  IF NOT FOUND THEN PERFORM mycelium.require_room(p_name); END IF;
  DELETE FROM mycelium.config WHERE room = p_name;
END
$$;
COMMENT ON FUNCTION mycelium.delete_room IS 'public write';

-- A room's name is its identity everywhere (keys, URNs, mirror folders): it never changes.
CREATE OR REPLACE FUNCTION mycelium.rooms_keep_name() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.name IS DISTINCT FROM OLD.name THEN
    PERFORM mycelium.refuse(409, 'immutable', 'a room is never renamed', jsonb_build_object('room', OLD.name));
  END IF;
  RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER t55_rooms_keep_name BEFORE UPDATE OF name ON mycelium.rooms
  FOR EACH ROW EXECUTE FUNCTION mycelium.rooms_keep_name();
