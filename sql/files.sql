-- Files: what a room holds besides its memories. Each file is a row of mycelium.files (its name, a
-- safe relative path, its size, SHA-256 and the content type sniffed from its first bytes) and its
-- bytes in mycelium.file_blocks, in order, so every replica reads the same bytes, streamed and read
-- by ranges, and the token gate's row-level security covers them as it covers every table of a room.
--
--   * An upload is one transaction: the hub draws an upload number, appends the body's blocks as it
--     arrives, and add_file records the file; a refusal, a broken connection or a killed hub rolls
--     the whole of it back: nothing partial is ever stored. A block whose file is not recorded when
--     its transaction commits is refused (the deferred key file_block_of_file).
--   * add_file checks the name, the room, the size limit (files.max_bytes) against the blocks' own
--     length, and whether the name is taken (409 file_exists unless replace).
--   * A file row deleted (rm, replaced, its room removed) takes its blocks with it (the key's cascade).

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
  data bigint NOT NULL,
  created_by text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, name),
  CONSTRAINT file_data_once UNIQUE (data),
  CONSTRAINT file_data_of_room UNIQUE (room, data)
);

-- An upload's number (files.data), drawn before its blocks are written.
CREATE SEQUENCE mycelium.file_uploads AS bigint;

-- The bytes of a file, in blocks of at most 1 MiB in order from 0, stored uncompressed (EXTERNAL:
-- PostgreSQL does not try to compress bytes that mostly do not compress, and reads a range of a
-- block without reading all of it). A block belongs to a recorded file by the time its transaction
-- commits (the deferred key), so no block outlives its upload or its file.
CREATE TABLE mycelium.file_blocks (
  room text NOT NULL,
  data bigint NOT NULL,
  start bigint NOT NULL CONSTRAINT file_block_start CHECK (start >= 0),
  bytes bytea STORAGE EXTERNAL NOT NULL
    CONSTRAINT file_block_size CHECK (octet_length(bytes) BETWEEN 1 AND 1048576),
  PRIMARY KEY (data, start),
  CONSTRAINT file_block_of_file FOREIGN KEY (room, data) REFERENCES mycelium.files (room, data)
    ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED
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

-- The largest block of a file's bytes (file_blocks.file_block_size holds it in the table).
CREATE OR REPLACE FUNCTION mycelium.file_block_bytes() RETURNS integer LANGUAGE sql IMMUTABLE AS $$
  SELECT 1048576
$$;

-- A new upload's number (what its blocks and then its file row carry).
CREATE OR REPLACE FUNCTION mycelium.new_file_upload() RETURNS bigint LANGUAGE sql AS $$
  SELECT nextval('mycelium.file_uploads')
$$;
COMMENT ON FUNCTION mycelium.new_file_upload IS 'public write';

-- Append p_chunk to upload p_data of p_room, in blocks of at most 1 MiB after those it has; the
-- bytes of a recorded file are never written again (409 file_exists). The upload's total length.
CREATE OR REPLACE FUNCTION mycelium.append_file_bytes(p_room text, p_data bigint, p_chunk bytea)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  block constant integer := mycelium.file_block_bytes();
  at bigint;
  n integer := octet_length(coalesce(p_chunk, ''::bytea));
  i integer := 0;
BEGIN
  IF EXISTS (SELECT 1 FROM mycelium.files WHERE data = p_data) THEN
    PERFORM mycelium.refuse(409, 'file_exists', format('upload %s is a recorded file: it is not written again', p_data));
  END IF;
  SELECT b.start + octet_length(b.bytes) INTO at FROM mycelium.file_blocks b
  WHERE b.data = p_data ORDER BY b.start DESC LIMIT 1;
  at := coalesce(at, 0);
  WHILE i < n LOOP
    INSERT INTO mycelium.file_blocks (room, data, start, bytes)
    VALUES (p_room, p_data, at + i, substring(p_chunk FROM i + 1 FOR block));
    i := i + block;
  END LOOP;
  RETURN at + n;
END
$$;
COMMENT ON FUNCTION mycelium.append_file_bytes IS 'public write';

-- p_length bytes of p_room's file p_name from p_offset (fewer at its end): the blocks the range
-- touches, each read only as far as it needs (a slice of an uncompressed value).
CREATE OR REPLACE FUNCTION mycelium.read_file_chunk(p_room text, p_name text, p_offset bigint, p_length integer)
RETURNS bytea LANGUAGE plpgsql STABLE AS $$
DECLARE f mycelium.files := mycelium.require_file(p_room, p_name);
BEGIN
  RETURN coalesce((
    SELECT string_agg(substring(b.bytes FROM (greatest(p_offset - b.start, 0) + 1)::integer
                                FOR (least(p_offset + p_length, b.start + octet_length(b.bytes))
                                     - greatest(p_offset, b.start))::integer), ''::bytea ORDER BY b.start)
    FROM mycelium.file_blocks b
    WHERE b.data = f.data AND b.start > p_offset - mycelium.file_block_bytes() AND b.start < p_offset + greatest(p_length, 0)
      AND b.start + octet_length(b.bytes) > p_offset), ''::bytea);
END
$$;
COMMENT ON FUNCTION mycelium.read_file_chunk IS 'public read';

-- Record upload p_data as p_room's file p_name (in the upload's transaction).
CREATE OR REPLACE FUNCTION mycelium.add_file(
  p_room text, p_name text, p_data bigint, p_sha256 text, p_content_type text, p_by text DEFAULT NULL,
  p_replace boolean DEFAULT false
) RETURNS mycelium.files LANGUAGE plpgsql AS $$
DECLARE
  by_handle text := mycelium.require_handle(mycelium.author(p_by, 'created_by'), 'created_by');
  cap bigint := mycelium.check_file(p_room, p_name, NULL, p_replace);
  len bigint;
  r mycelium.files;
BEGIN
  SELECT coalesce(sum(octet_length(b.bytes)), 0) INTO len FROM mycelium.file_blocks b WHERE b.data = p_data;
  IF len > cap THEN
    PERFORM mycelium.refuse(413, 'file_too_large', format('%s bytes is over the limit of %s bytes (files.max_bytes)', len, cap),
                            jsonb_build_object('size', len, 'limit', cap));
  END IF;
  DELETE FROM mycelium.files WHERE room = p_room AND name = p_name;  -- (replace: its blocks go too)
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
