-- Files (sql/files.sql): an upload is check_file, then in one transaction new_file_upload,
-- append_file_bytes as the body arrives, add_file; a read is get_file, then read_file_chunk.

-- name: check_file
-- returns: value
SELECT mycelium.check_file(:room, :name, :length, :replace)

-- name: new_file_upload
-- returns: value
SELECT mycelium.new_file_upload()

-- name: append_file_bytes
-- returns: value
SELECT mycelium.append_file_bytes(:room, :data, :chunk)

-- name: add_file
-- returns: row
SELECT * FROM mycelium.add_file(mycelium.acting(:room, :actor, :actor_kind), :name, :data, :sha256, :content_type,
                                :by, :replace)

-- name: list_files
-- a room's files by name; 404 without the room
SELECT room, name, size, sha256, content_type, created_by, created_at FROM mycelium.files
WHERE room = :room AND mycelium.room_known(:room) ORDER BY name

-- name: get_file
-- returns: row
SELECT * FROM mycelium.require_file(:room, :name)

-- name: read_file_chunk
-- returns: value
SELECT mycelium.read_file_chunk(:room, :name, :offset, :length)

-- name: remove_file
-- returns: row
SELECT * FROM mycelium.remove_file(mycelium.acting(:room, :actor, :actor_kind), :name)
