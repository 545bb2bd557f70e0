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

CREATE OR REPLACE FUNCTION mycelium.require_room(p_room text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM mycelium.rooms WHERE name = p_room) OR NOT mycelium.room_visible(p_room) THEN
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

CREATE OR REPLACE FUNCTION mycelium.create_room(
  p_name text, p_title text DEFAULT NULL, p_description text DEFAULT NULL,
  p_is_public boolean DEFAULT true, p_owner text DEFAULT NULL, p_members text[] DEFAULT '{}',
  p_created_by text DEFAULT NULL
) RETURNS mycelium.rooms LANGUAGE plpgsql AS $$
DECLARE
  problem text := mycelium.room_name_problem(p_name);
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
  VALUES (p_name, p_title, p_description, coalesce(p_is_public, true),
          CASE WHEN coalesce(p_is_public, true) THEN p_owner ELSE coalesce(p_owner, creator) END,
          coalesce(p_members, '{}'), creator)
  ON CONFLICT (name) DO NOTHING
  RETURNING * INTO r;
  IF r.name IS NULL THEN
    PERFORM mycelium.refuse(409, 'room_exists', format('Room %L already exists', p_name),
                            jsonb_build_object('name', p_name));
  END IF;
  RETURN r;
END
$$;

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

CREATE OR REPLACE FUNCTION mycelium.delete_room(p_name text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM mycelium.rooms WHERE name = p_name;
  IF NOT FOUND THEN PERFORM mycelium.require_room(p_name); END IF;
  DELETE FROM mycelium.config WHERE room = p_name;
END
$$;

-- A room's name is its identity everywhere (keys, URNs, mirror folders): it never changes.
CREATE OR REPLACE FUNCTION mycelium.rooms_keep_name() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.name IS DISTINCT FROM OLD.name THEN
    PERFORM mycelium.refuse(409, 'immutable', 'a room is never renamed', jsonb_build_object('room', OLD.name));
  END IF;
  RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER rooms_keep_name BEFORE UPDATE OF name ON mycelium.rooms
  FOR EACH ROW EXECUTE FUNCTION mycelium.rooms_keep_name();
