-- Files: what a room holds besides its memories. Each file is a PostgreSQL large object (so every
-- replica reads the same bytes, streamed and read by ranges), with its size, SHA-256 and the content
-- type sniffed from its first bytes, under a name that is a safe relative path.
--
--   * An upload is one transaction: the hub creates the large object, writes the body into it as
--     it arrives, and add_file records it; a refusal, a broken connection or a killed hub rolls the
--     whole of it back, the large object too: nothing partial is ever stored.
--   * add_file checks the name, the room, the size limit (files.max_bytes) against the large
--     object's own length, and whether the name is taken (409 file_exists unless replace).
--   * A file row deleted (rm, replaced, its room removed) takes its large object with it (t80).

CREATE OR REPLACE FUNCTION mycelium.file_name_problem(p_name text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN p_name IS NULL OR p_name = '' THEN 'a file needs a name'
    WHEN octet_length(p_name) > 1024 THEN 'a file name is at most 1024 bytes'
    WHEN p_name ~ '[\x01-\x1f\x7f\\]' THEN 'a file name holds no control character and no backslash'
    WHEN left(p_name, 1) = '/' THEN 'a file name is relative: no leading /'
    WHEN p_name ~ '(^|/)\.{1,2}(/|$)' THEN 'a file name has no . or .. part'
    WHEN p_name ~ '//' OR right(p_name, 1) = '/' THEN 'a file name has no empty part'
  END
$$;
COMMENT ON FUNCTION mycelium.file_name_problem IS 'public read';

CREATE TABLE mycelium.files (
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  name text NOT NULL CONSTRAINT file_name_safe CHECK (mycelium.file_name_problem(name) IS NULL),
  size bigint NOT NULL CONSTRAINT file_size CHECK (size >= 0),
  sha256 text NOT NULL CONSTRAINT file_sha256 CHECK (sha256 ~ '^[0-9a-f]{64}$'),
  content_type text NOT NULL,
  data oid NOT NULL,
  created_by text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, name),
  CONSTRAINT file_data_once UNIQUE (data)
);

-- The largest file a room takes (files.max_bytes, per room or hub-wide).
CREATE OR REPLACE FUNCTION mycelium.file_limit(p_room text) RETURNS bigint LANGUAGE sql STABLE AS $$
  SELECT (x.value #>> '{}')::double precision::bigint FROM mycelium.settings_of(p_room) x
  WHERE x.name = 'files.max_bytes'
$$;
COMMENT ON FUNCTION mycelium.file_limit IS 'public read';

-- Before an upload is read: refuse (404 room, 422 bad_file_name, 413 file_too_large when the
-- declared length is over the limit, 409 file_exists unless p_replace). Returns the limit.
CREATE OR REPLACE FUNCTION mycelium.check_file(p_room text, p_name text, p_length bigint DEFAULT NULL,
                                               p_replace boolean DEFAULT false)
RETURNS bigint LANGUAGE plpgsql STABLE AS $$
DECLARE
  why text := mycelium.file_name_problem(p_name);
  cap bigint;
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF why IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'bad_file_name', format('name: %s (%L)', why, left(coalesce(p_name, ''), 200)),
                            jsonb_build_object('field', 'name'));
  END IF;
  cap := mycelium.file_limit(p_room);
  IF p_length IS NOT NULL AND p_length > cap THEN
    PERFORM mycelium.refuse(413, 'file_too_large',
      format('%s bytes is over the limit of %s bytes (files.max_bytes)', p_length, cap),
      jsonb_build_object('size', p_length, 'limit', cap));
  END IF;
  IF NOT coalesce(p_replace, false) AND EXISTS (SELECT 1 FROM mycelium.files f WHERE f.room = p_room AND f.name = p_name) THEN
    PERFORM mycelium.refuse(409, 'file_exists', format('room %L has a file %L already (replace it to write it again)', p_room, p_name),
                            jsonb_build_object('room', p_room, 'name', p_name));
  END IF;
  RETURN cap;
END
$$;
COMMENT ON FUNCTION mycelium.check_file IS 'public read';

-- A new large object for an upload, owned by the schema's owner (the verbs that write and read it
-- run with its rights; the hub's role has none on it).
CREATE OR REPLACE FUNCTION mycelium.new_file_object() RETURNS oid LANGUAGE plpgsql AS $$
BEGIN
  RETURN lo_create(0);
END
$$;
COMMENT ON FUNCTION mycelium.new_file_object IS 'public write';

-- Write p_chunk at p_offset of an upload's large object; the object of a recorded file is never
-- written again (409 file_exists).
CREATE OR REPLACE FUNCTION mycelium.write_file_chunk(p_data oid, p_offset bigint, p_chunk bytea)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM mycelium.files WHERE data = p_data) THEN
    PERFORM mycelium.refuse(409, 'file_exists', format('large object %s is a recorded file: it is not written again', p_data));
  END IF;
  PERFORM lo_put(p_data, p_offset, p_chunk);
END
$$;
COMMENT ON FUNCTION mycelium.write_file_chunk IS 'public write';

-- p_length bytes of p_room's file p_name from p_offset (fewer at its end).
CREATE OR REPLACE FUNCTION mycelium.read_file_chunk(p_room text, p_name text, p_offset bigint, p_length integer)
RETURNS bytea LANGUAGE plpgsql STABLE AS $$
DECLARE f mycelium.files := mycelium.require_file(p_room, p_name);
BEGIN
  RETURN lo_get(f.data, p_offset, p_length);
END
$$;
COMMENT ON FUNCTION mycelium.read_file_chunk IS 'public read';

-- Record an uploaded large object as p_room's file p_name (in the upload's transaction).
CREATE OR REPLACE FUNCTION mycelium.add_file(
  p_room text, p_name text, p_data oid, p_sha256 text, p_content_type text, p_by text DEFAULT NULL,
  p_replace boolean DEFAULT false
) RETURNS mycelium.files LANGUAGE plpgsql AS $$
DECLARE
  by_handle text := mycelium.require_handle(mycelium.author(p_by, 'created_by'), 'created_by');
  cap bigint := mycelium.check_file(p_room, p_name, NULL, p_replace);
  fd integer;
  len bigint;
  r mycelium.files;
BEGIN
  fd := lo_open(p_data, 262144);  -- INV_READ
  len := lo_lseek64(fd, 0, 2);  -- SEEK_END: the object's own length
  PERFORM lo_close(fd);
  IF len > cap THEN
    PERFORM mycelium.refuse(413, 'file_too_large', format('%s bytes is over the limit of %s bytes (files.max_bytes)', len, cap),
                            jsonb_build_object('size', len, 'limit', cap));
  END IF;
  DELETE FROM mycelium.files WHERE room = p_room AND name = p_name;  -- (replace: its object goes, t80)
  INSERT INTO mycelium.files (room, name, size, sha256, content_type, data, created_by)
  VALUES (p_room, p_name, len, lower(p_sha256), coalesce(nullif(p_content_type, ''), 'application/octet-stream'),
          p_data, by_handle)
  RETURNING * INTO r;
  RETURN r;
END
$$;
COMMENT ON FUNCTION mycelium.add_file IS 'public write';

CREATE OR REPLACE FUNCTION mycelium.require_file(p_room text, p_name text) RETURNS mycelium.files
LANGUAGE plpgsql STABLE AS $$
DECLARE r mycelium.files;
BEGIN
  PERFORM mycelium.require_room(p_room);
  SELECT * INTO r FROM mycelium.files WHERE room = p_room AND name = p_name;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse(404, 'file_not_found', format('no file %L in room %L', left(coalesce(p_name, ''), 200), p_room),
                            jsonb_build_object('room', p_room, 'name', p_name));
  END IF;
  RETURN r;
END
$$;
COMMENT ON FUNCTION mycelium.require_file IS 'public read';

CREATE OR REPLACE FUNCTION mycelium.remove_file(p_room text, p_name text) RETURNS mycelium.files
LANGUAGE plpgsql AS $$
DECLARE r mycelium.files := mycelium.require_file(p_room, p_name);
BEGIN
  DELETE FROM mycelium.files WHERE room = p_room AND name = p_name;
  RETURN r;
END
$$;
COMMENT ON FUNCTION mycelium.remove_file IS 'public write';

-- A file row gone (removed, replaced, its room dropped) takes its large object along.
CREATE OR REPLACE FUNCTION mycelium.files_unlink() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' OR OLD.data IS DISTINCT FROM NEW.data THEN
    IF EXISTS (SELECT 1 FROM pg_largeobject_metadata WHERE oid = OLD.data) THEN
      PERFORM lo_unlink(OLD.data);
    END IF;
  END IF;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER t80_files_unlink AFTER DELETE OR UPDATE ON mycelium.files
  FOR EACH ROW EXECUTE FUNCTION mycelium.files_unlink();
