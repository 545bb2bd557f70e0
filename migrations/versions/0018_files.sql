-- Revision 0018_files (frozen): files a room holds (sql/files.sql): each with its size, SHA-256 and
-- sniffed content type, its bytes in blocks (file_blocks); the size limit setting. file_name_problem is defined here
-- as it stood, for a database migrated from scratch that has no code yet.
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

INSERT INTO mycelium.setting_kinds (name, value_type, default_value, min_value, max_value, description) VALUES
  ('files.max_bytes', 'number', '268435456', 0, 1099511627776,
   'The largest file a room takes, in bytes; a bigger upload is refused (413) and nothing of it is stored.');
