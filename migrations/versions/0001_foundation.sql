-- Frozen: the definitions revision 0001_foundation applied when it was released (0.1.0).
-- Never edit this file: change sql/ and, for tables, add a new revision.

-- ==== sql/base.sql ====
-- Schema, refusals and hub-wide facts.
--
-- Every verb refuses with SQLSTATE 'MYnnn' where nnn is the HTTP status the refusal means
-- (MY404 not found, MY409 conflict, MY422 unprocessable, ...). MESSAGE is the sentence a person
-- reads; DETAIL is a JSON object {"error": <stable code>, ...extra fields}. psql shows both; the hub
-- turns them into {"error", "message", ...} bodies with that status.

CREATE SCHEMA IF NOT EXISTS mycelium;

CREATE OR REPLACE FUNCTION mycelium.refuse(status integer, error text, message text, extra jsonb DEFAULT '{}')
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING
    ERRCODE = 'MY' || lpad(status::text, 3, '0'),
    MESSAGE = message,
    DETAIL = (coalesce(extra, '{}'::jsonb) || jsonb_build_object('error', error))::text;
END
$$;
COMMENT ON FUNCTION mycelium.refuse(integer,text,text,jsonb) IS 'Raise a refusal: SQLSTATE MY<status>, a sentence, and a JSON detail.';

-- One row: this store's identity (reported by /health, stamped into exports).
CREATE TABLE mycelium.store (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  id uuid NOT NULL DEFAULT gen_random_uuid(),
  created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO mycelium.store DEFAULT VALUES;

-- Hub settings that every replica must agree on live here, not in a replica's environment.
-- room = '' is the hub-wide value; a room's own row overrides it.
CREATE TABLE mycelium.config (
  room text NOT NULL DEFAULT '',
  name text NOT NULL CHECK (name ~ '^[a-z][a-z0-9_.]{0,63}$'),
  value jsonb NOT NULL,
  updated_by text,
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, name)
);

CREATE OR REPLACE FUNCTION mycelium.config_value(p_name text, p_room text DEFAULT '') RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT value FROM mycelium.config
  WHERE name = p_name AND room IN (coalesce(p_room, ''), '')
  ORDER BY room DESC LIMIT 1
$$;

CREATE OR REPLACE FUNCTION mycelium.set_config(p_name text, p_value jsonb, p_room text DEFAULT '', p_by text DEFAULT NULL)
RETURNS mycelium.config LANGUAGE plpgsql AS $$
DECLARE r mycelium.config;
BEGIN
  IF p_value IS NULL THEN
    DELETE FROM mycelium.config WHERE room = coalesce(p_room, '') AND name = p_name RETURNING * INTO r;
    RETURN r;
  END IF;
  INSERT INTO mycelium.config (room, name, value, updated_by)
  VALUES (coalesce(p_room, ''), p_name, p_value, p_by)
  ON CONFLICT (room, name) DO UPDATE SET value = excluded.value, updated_by = excluded.updated_by,
                                         updated_at = now()
  RETURNING * INTO r;
  RETURN r;
END
$$;

-- ==== sql/rooms.sql ====
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
  IF NOT EXISTS (SELECT 1 FROM mycelium.rooms WHERE name = p_room) THEN
    PERFORM mycelium.refuse(404, 'room_not_found', format('Room %L not found', p_room),
                            jsonb_build_object('room', p_room));
  END IF;
END
$$;

CREATE OR REPLACE FUNCTION mycelium.create_room(
  p_name text, p_title text DEFAULT NULL, p_description text DEFAULT NULL,
  p_is_public boolean DEFAULT true, p_owner text DEFAULT NULL, p_members text[] DEFAULT '{}',
  p_created_by text DEFAULT NULL
) RETURNS mycelium.rooms LANGUAGE plpgsql AS $$
DECLARE
  problem text := mycelium.room_name_problem(p_name);
  r mycelium.rooms;
BEGIN
  IF problem IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'invalid_room_name', problem, jsonb_build_object('name', p_name));
  END IF;
  IF NOT coalesce(p_is_public, true) AND coalesce(p_owner, p_created_by) IS NULL THEN
    PERFORM mycelium.refuse(422, 'private_room_needs_owner', 'a private room needs an owner');
  END IF;
  INSERT INTO mycelium.rooms (name, title, description, is_public, owner, members, created_by)
  VALUES (p_name, p_title, p_description, coalesce(p_is_public, true),
          CASE WHEN coalesce(p_is_public, true) THEN p_owner ELSE coalesce(p_owner, p_created_by) END,
          coalesce(p_members, '{}'), p_created_by)
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
-- members, owner). Making a room private without an owner makes p_by its owner.
CREATE OR REPLACE FUNCTION mycelium.update_room(p_name text, p_patch jsonb, p_by text DEFAULT NULL)
RETURNS mycelium.rooms LANGUAGE plpgsql AS $$
DECLARE
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
    IF p_by IS NULL THEN
      PERFORM mycelium.refuse(422, 'private_room_needs_owner', 'a private room needs an owner');
    END IF;
    r.owner := p_by;
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

-- ==== sql/memories.sql ====
-- Memories: markdown documents at keys inside a room, versioned, with a write-once thread binding.
--
-- Rules the database keeps, whoever writes (the hub, an engine, a person in psql):
--   * every memory gets a thread id (`episode`) minted here on insert; a caller cannot choose it,
--     and no UPDATE may change it, nor the room or key it belongs to;
--   * every content write bumps `version` by one and appends the new version to memory_versions;
--     writing only the vector (the embedder catching up) is not a content write;
--   * memory_versions is append-only: rows leave it only together with their room;
--   * every write and delete is recorded in `changes` (the outbox the markdown mirror follows).

-- Wake hints. NOTIFY only ever says "look again" (whoever wakes re-reads the tables), but a
-- transaction that sent one commits under a cluster-wide lock that PostgreSQL takes before commit
-- and holds past the WAL flush, so notifying transactions commit one at a time instead of sharing
-- a flush. A writer that sends its hints itself once it has committed (the hub does, batched on its
-- one listener connection) calls defer_wakes() first, in the same transaction: the triggers then
-- append their hints to the transaction-local setting mycelium.wake_hints, one '<channel>\t<payload>'
-- line each, which the caller reads back in the same statement. Every other writer (psql, scripts,
-- another client) gets the trigger's NOTIFY as before.

-- Returns p_passthrough unchanged, so a call can wrap a verb's first argument: arguments are
-- evaluated before the verb runs, so the setting is in place before any trigger fires.
-- (set_config assigned, not PERFORMed: an assignment is a simple expression, a PERFORM a query.)
CREATE OR REPLACE FUNCTION mycelium.defer_wakes(p_passthrough text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE done text;
BEGIN
  done := set_config('mycelium.defer_wake', 'on', true);
  done := set_config('mycelium.wake_hints', '', true);
  RETURN p_passthrough;
END
$$;

-- NOTIFY p_channel, or keep the hint for the caller when it asked to send its own.
CREATE OR REPLACE FUNCTION mycelium.wake_hint(p_channel text, p_payload text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE kept text;
BEGIN
  IF current_setting('mycelium.defer_wake', true) = 'on' THEN
    kept := current_setting('mycelium.wake_hints', true);
    kept := set_config('mycelium.wake_hints',
      CASE WHEN coalesce(kept, '') = '' THEN '' ELSE kept || E'\n' END || p_channel || E'\t' || p_payload, true);
  ELSE
    PERFORM pg_notify(p_channel, p_payload);
  END IF;
  RETURN p_payload;
END
$$;

CREATE OR REPLACE FUNCTION mycelium.memory_key_problem(p_key text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN p_key IS NULL OR btrim(p_key) = '' THEN 'a memory key must not be blank'
    WHEN length(p_key) > 512 THEN 'a memory key has at most 512 characters'
    WHEN p_key ~ '[[:cntrl:]\\]' THEN 'a memory key must not contain control characters or backslashes'
    WHEN p_key ~ '^/' OR p_key ~ '/$' THEN 'a memory key must not start or end with "/"'
    WHEN p_key ~ '//' THEN 'a memory key must not contain an empty segment'
    WHEN p_key ~ '(^|/)\.{1,2}(/|$)' THEN 'a memory key must not contain "." or ".." segments'
  END
$$;

CREATE OR REPLACE FUNCTION mycelium.episode_urn(p_room text, p_short text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT 'urn:ioc:mycelium:episode:' || p_room || ':' || p_short $$;

CREATE OR REPLACE FUNCTION mycelium.episode_short_id(p_episode text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT regexp_replace(p_episode, '^.*:', '') $$;

CREATE TABLE mycelium.memories (
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  key text NOT NULL CONSTRAINT memory_key_valid CHECK (mycelium.memory_key_problem(key) IS NULL),
  value jsonb NOT NULL CONSTRAINT memory_value_object CHECK (jsonb_typeof(value) = 'object'),
  body text GENERATED ALWAYS AS (coalesce(value ->> 'text', jsonb_pretty(value))) STORED,
  meta jsonb NOT NULL DEFAULT '{}' CONSTRAINT memory_meta_object CHECK (jsonb_typeof(meta) = 'object'),
  tags text[] NOT NULL DEFAULT '{}',
  content_text text,
  episode text NOT NULL,
  version integer NOT NULL DEFAULT 1 CHECK (version >= 1),
  created_by text NOT NULL,
  updated_by text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  embedding vector(384),
  embedded_hash text,
  search_tsv tsvector GENERATED ALWAYS AS (
    to_tsvector('english'::regconfig,
                replace(key, '/', ' ') || ' ' || coalesce(content_text, value ->> 'text', value::text))
  ) STORED,
  PRIMARY KEY (room, key),
  CONSTRAINT one_memory_per_thread UNIQUE (room, episode)
);
CREATE INDEX memories_recent ON mycelium.memories (room, updated_at DESC);
CREATE INDEX memories_fts ON mycelium.memories USING gin (search_tsv);
CREATE INDEX memories_embedding ON mycelium.memories USING hnsw (embedding vector_cosine_ops);
CREATE INDEX memories_missing_vector ON mycelium.memories (room, key) WHERE embedding IS NULL;

COMMENT ON COLUMN mycelium.memories.episode IS
  'The memory''s thread, minted by the database on insert; write-once (trigger) and unique per room.';

-- Append-only history of every content version, and tombstones for deletes.
CREATE TABLE mycelium.memory_versions (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  key text NOT NULL,
  episode text NOT NULL,
  version integer NOT NULL,
  op text NOT NULL CHECK (op IN ('write', 'delete')),
  value jsonb,
  meta jsonb,
  tags text[],
  content_text text,
  written_by text NOT NULL,
  written_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (room, episode, version, op)
);
CREATE INDEX memory_versions_by_key ON mycelium.memory_versions (room, key, id);

-- The outbox that followers (the markdown mirror) read in commit-safe order: (tx, seq) below the
-- oldest transaction still running is final, so a follower that resumes from a stored (tx, seq)
-- neither misses nor repeats a change.
CREATE TABLE mycelium.changes (
  tx xid8 NOT NULL DEFAULT pg_current_xact_id(),
  seq bigint GENERATED ALWAYS AS IDENTITY,
  room text NOT NULL,
  key text,
  op text NOT NULL CHECK (op IN ('upsert', 'delete', 'room_delete')),
  at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tx, seq)
);

CREATE TABLE mycelium.followers (
  name text PRIMARY KEY,
  tx xid8 NOT NULL DEFAULT '0',
  seq bigint NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- Who is writing: the verbs set it for their transaction; a direct SQL write falls back to the
-- database user, so history always names somebody.
CREATE OR REPLACE FUNCTION mycelium.actor() RETURNS text LANGUAGE sql STABLE AS $$
  SELECT coalesce(nullif(current_setting('mycelium.actor', true), ''), session_user::text)
$$;

-- ---------------------------------------------------------------------------------------------
-- Triggers: binding, versioning, history, outbox.

CREATE OR REPLACE FUNCTION mycelium.memories_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE candidate text;
BEGIN
  LOOP
    candidate := mycelium.episode_urn(NEW.room, substr(replace(gen_random_uuid()::text, '-', ''), 1, 12));
    EXIT WHEN NOT EXISTS (SELECT 1 FROM mycelium.memories WHERE room = NEW.room AND episode = candidate);
  END LOOP;
  NEW.episode := candidate;
  NEW.version := 1;
  NEW.created_at := now();
  NEW.updated_at := NEW.created_at;
  NEW.updated_by := coalesce(NEW.updated_by, NEW.created_by);
  RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER memories_before_insert BEFORE INSERT ON mycelium.memories
  FOR EACH ROW EXECUTE FUNCTION mycelium.memories_before_insert();

CREATE OR REPLACE FUNCTION mycelium.memories_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.episode IS DISTINCT FROM OLD.episode OR NEW.room IS DISTINCT FROM OLD.room
     OR NEW.key IS DISTINCT FROM OLD.key THEN
    PERFORM mycelium.refuse(409, 'binding_immutable',
      format('the thread binding of %L is write-once: its episode, room and key never change', OLD.key),
      jsonb_build_object('key', OLD.key, 'episode', OLD.episode));
  END IF;
  NEW.created_at := OLD.created_at;
  NEW.created_by := OLD.created_by;
  IF (NEW.value, NEW.meta, NEW.tags, NEW.content_text, NEW.updated_by)
       IS NOT DISTINCT FROM (OLD.value, OLD.meta, OLD.tags, OLD.content_text, OLD.updated_by)
     AND (NEW.embedding, NEW.embedded_hash) IS DISTINCT FROM (OLD.embedding, OLD.embedded_hash) THEN
    -- only the vector moved: not a content write
    NEW.version := OLD.version;
    NEW.updated_at := OLD.updated_at;
  ELSE
    NEW.version := OLD.version + 1;
    NEW.updated_at := greatest(now(), OLD.updated_at);
  END IF;
  RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER memories_before_update BEFORE UPDATE ON mycelium.memories
  FOR EACH ROW EXECUTE FUNCTION mycelium.memories_before_update();

CREATE OR REPLACE FUNCTION mycelium.memories_after_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.version = OLD.version THEN
    RETURN NULL;
  END IF;
  INSERT INTO mycelium.memory_versions (room, key, episode, version, op, value, meta, tags, content_text,
                                        written_by, written_at)
  VALUES (NEW.room, NEW.key, NEW.episode, NEW.version, 'write', NEW.value, NEW.meta, NEW.tags,
          NEW.content_text, NEW.updated_by, NEW.updated_at);
  INSERT INTO mycelium.changes (room, key, op) VALUES (NEW.room, NEW.key, 'upsert');
  PERFORM mycelium.wake_hint('mycelium_changes', NEW.room);
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER memories_after_write AFTER INSERT OR UPDATE ON mycelium.memories
  FOR EACH ROW EXECUTE FUNCTION mycelium.memories_after_write();

CREATE OR REPLACE FUNCTION mycelium.memories_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM mycelium.rooms WHERE name = OLD.room) THEN
    RETURN NULL;  -- the room is going: rooms_after_delete records that once
  END IF;
  INSERT INTO mycelium.memory_versions (room, key, episode, version, op, written_by)
  VALUES (OLD.room, OLD.key, OLD.episode, OLD.version, 'delete', mycelium.actor());
  INSERT INTO mycelium.changes (room, key, op) VALUES (OLD.room, OLD.key, 'delete');
  PERFORM mycelium.wake_hint('mycelium_changes', OLD.room);
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER memories_after_delete AFTER DELETE ON mycelium.memories
  FOR EACH ROW EXECUTE FUNCTION mycelium.memories_after_delete();

CREATE OR REPLACE FUNCTION mycelium.rooms_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO mycelium.changes (room, key, op) VALUES (OLD.name, NULL, 'room_delete');
  PERFORM mycelium.wake_hint('mycelium_changes', OLD.name);
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER rooms_after_delete AFTER DELETE ON mycelium.rooms
  FOR EACH ROW EXECUTE FUNCTION mycelium.rooms_after_delete();

-- Append-only: history rows are never edited, and leave only with their room (the FK cascade runs
-- after the room row is gone, which is the one case this trigger lets through).
CREATE OR REPLACE FUNCTION mycelium.refuse_history_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' AND NOT EXISTS (SELECT 1 FROM mycelium.rooms WHERE name = OLD.room) THEN
    RETURN OLD;
  END IF;
  PERFORM mycelium.refuse(409, 'append_only', format('%s is append-only: %s refused', TG_TABLE_NAME, TG_OP));
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER memory_versions_append_only BEFORE UPDATE OR DELETE ON mycelium.memory_versions
  FOR EACH ROW EXECUTE FUNCTION mycelium.refuse_history_change();

CREATE OR REPLACE FUNCTION mycelium.refuse_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.refuse(409, 'append_only', format('%s is append-only: TRUNCATE refused', TG_TABLE_NAME));
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER memory_versions_no_truncate BEFORE TRUNCATE ON mycelium.memory_versions
  FOR EACH STATEMENT EXECUTE FUNCTION mycelium.refuse_truncate();

-- ---------------------------------------------------------------------------------------------
-- Verbs.

-- Keys the store owns: sent in meta, they are ignored.
CREATE OR REPLACE FUNCTION mycelium.managed_memory_keys() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY['key', 'created_by', 'updated_by', 'version', 'tags', 'created_at', 'updated_at',
               'value', 'episode']
$$;

CREATE OR REPLACE FUNCTION mycelium.stale_base_detail(m mycelium.memories) RETURNS jsonb LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object('key', m.key, 'current_version', m.version, 'current_content', m.value,
                            'updated_by', m.updated_by, 'updated_at', m.updated_at)
$$;

-- Upsert one memory. p_value is the content object ({"text": "..."} for prose). p_meta overlays the
-- existing unmanaged frontmatter (a JSON null removes a key); managed keys in it are ignored.
-- p_base_version: the version the writer read (0 = "I expect no memory here"); if the memory has
-- moved on, nothing is written and the refusal carries the current content (409 stale_base).
-- p_embedding: the vector of coalesce(p_content_text, text) when the caller has one; without it the
-- old vector is kept if the text is unchanged (or p_embed is false), else cleared for the embedder.
CREATE OR REPLACE FUNCTION mycelium.write_memory(
  p_room text, p_key text, p_value jsonb, p_by text,
  p_tags text[] DEFAULT NULL, p_meta jsonb DEFAULT NULL, p_content_text text DEFAULT NULL,
  p_base_version integer DEFAULT NULL, p_embedding vector DEFAULT NULL, p_embed boolean DEFAULT true
) RETURNS mycelium.memories LANGUAGE plpgsql AS $$
DECLARE
  problem text := mycelium.memory_key_problem(p_key);
  v jsonb;
  new_meta jsonb;
  text_hash text;
  cur mycelium.memories;
  r mycelium.memories;
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF problem IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'invalid_key', problem, jsonb_build_object('key', p_key));
  END IF;
  IF p_by IS NULL OR btrim(p_by) = '' THEN
    PERFORM mycelium.refuse(422, 'missing_author', 'a memory write names its author (created_by)');
  END IF;
  v := CASE jsonb_typeof(p_value) WHEN 'string' THEN jsonb_build_object('text', p_value #>> '{}')
                                  WHEN 'object' THEN p_value END;
  IF v IS NULL THEN
    PERFORM mycelium.refuse(422, 'invalid_value', 'a memory value is a string or an object',
                            jsonb_build_object('key', p_key));
  END IF;
  IF p_meta IS NOT NULL AND jsonb_typeof(p_meta) <> 'object' THEN
    PERFORM mycelium.refuse(422, 'invalid_meta', 'meta is an object of frontmatter fields',
                            jsonb_build_object('key', p_key));
  END IF;
  IF p_base_version IS NOT NULL AND p_base_version < 0 THEN
    PERFORM mycelium.refuse(422, 'invalid_base_version', 'base_version is 0 or more',
                            jsonb_build_object('key', p_key));
  END IF;
  PERFORM set_config('mycelium.actor', p_by, true);
  text_hash := md5(coalesce(p_content_text, v ->> 'text', v::text));

  LOOP
    SELECT * INTO cur FROM mycelium.memories WHERE room = p_room AND key = p_key FOR UPDATE;
    IF FOUND THEN
      IF p_base_version IS NOT NULL AND p_base_version <> cur.version THEN
        PERFORM mycelium.refuse(409, 'stale_base',
          format('%L is at version %s, not %s: re-read it and merge', p_key, cur.version, p_base_version),
          mycelium.stale_base_detail(cur));
      END IF;
      new_meta := jsonb_strip_nulls(cur.meta || (coalesce(p_meta, '{}') - mycelium.managed_memory_keys()));
      UPDATE mycelium.memories SET
        value = v, meta = new_meta, tags = coalesce(p_tags, cur.tags), content_text = p_content_text,
        updated_by = p_by,
        embedding = CASE WHEN p_embedding IS NOT NULL THEN p_embedding
                         WHEN NOT p_embed OR cur.embedded_hash = text_hash THEN cur.embedding END,
        embedded_hash = CASE WHEN p_embedding IS NOT NULL THEN text_hash
                             WHEN NOT p_embed OR cur.embedded_hash = text_hash THEN cur.embedded_hash END
      WHERE room = p_room AND key = p_key
      RETURNING * INTO r;
      RETURN r;
    END IF;
    IF p_base_version IS NOT NULL AND p_base_version <> 0 THEN
      PERFORM mycelium.refuse(409, 'stale_base',
        format('%L does not exist, so it is not at version %s', p_key, p_base_version),
        jsonb_build_object('key', p_key, 'current_version', 0, 'current_content', NULL));
    END IF;
    INSERT INTO mycelium.memories (room, key, value, meta, tags, content_text, created_by, updated_by,
                                   embedding, embedded_hash)
    VALUES (p_room, p_key, v, jsonb_strip_nulls(coalesce(p_meta, '{}') - mycelium.managed_memory_keys()),
            coalesce(p_tags, '{}'), p_content_text, p_by, p_by, p_embedding,
            CASE WHEN p_embedding IS NOT NULL THEN text_hash END)
    ON CONFLICT (room, key) DO NOTHING
    RETURNING * INTO r;
    IF r.key IS NOT NULL THEN
      RETURN r;
    END IF;
    -- a concurrent writer created it first: go round and update it under its row lock
  END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION mycelium.delete_memory(p_room text, p_key text, p_by text DEFAULT NULL)
RETURNS mycelium.memories LANGUAGE plpgsql AS $$
DECLARE r mycelium.memories;
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF p_by IS NOT NULL THEN PERFORM set_config('mycelium.actor', p_by, true); END IF;
  DELETE FROM mycelium.memories WHERE room = p_room AND key = p_key RETURNING * INTO r;
  IF r.key IS NULL THEN
    PERFORM mycelium.refuse(404, 'memory_not_found', format('no memory %L in room %L', p_key, p_room),
                            jsonb_build_object('room', p_room, 'key', p_key));
  END IF;
  RETURN r;
END
$$;

-- The embedder catching up: store a vector for the version it was computed from (no-op if the
-- memory has moved on since). Not a content write: no version bump, no history row.
CREATE OR REPLACE FUNCTION mycelium.set_embedding(p_room text, p_key text, p_version integer, p_embedding vector)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  UPDATE mycelium.memories
  SET embedding = p_embedding, embedded_hash = md5(coalesce(content_text, value ->> 'text', value::text))
  WHERE room = p_room AND key = p_key AND version = p_version;
  RETURN FOUND;
END
$$;

-- Hybrid search: vector neighbours and full-text matches (all terms) fused by reciprocal rank; similarity is
-- the cosine similarity to the query (NULL for a memory without a vector). With a room filter the
-- HNSW index is scanned iteratively so the filter never under-fills the result.
CREATE OR REPLACE FUNCTION mycelium.search_memories(
  p_room text, p_query_embedding vector, p_query text, p_limit integer DEFAULT 10,
  p_tags text[] DEFAULT NULL, p_min_similarity double precision DEFAULT 0
) RETURNS TABLE (key text, similarity double precision, score double precision)
LANGUAGE plpgsql STABLE
SET hnsw.iterative_scan = 'relaxed_order' SET hnsw.ef_search = '100'
AS $$
DECLARE
  k integer := greatest(p_limit * 4, 40);
  -- every query term must match: full text boosts exact wording, it never drowns the vector ranking
  -- under one common word
  tsq tsquery := nullif(plainto_tsquery('english', coalesce(p_query, ''))::text, '')::tsquery;
BEGIN
  RETURN QUERY
  WITH vec AS MATERIALIZED (
    SELECT m.key, m.embedding <=> p_query_embedding AS dist
    FROM mycelium.memories m
    WHERE p_query_embedding IS NOT NULL AND m.room = p_room AND m.embedding IS NOT NULL
      AND (p_tags IS NULL OR m.tags @> p_tags)
    ORDER BY m.embedding <=> p_query_embedding
    LIMIT k
  ), vec_ranked AS (
    SELECT v.key, 1 - v.dist AS sim, row_number() OVER (ORDER BY v.dist) AS rank FROM vec v
  ), fts AS (
    SELECT m.key, row_number() OVER (ORDER BY ts_rank_cd(m.search_tsv, tsq) DESC) AS rank
    FROM mycelium.memories m
    WHERE tsq IS NOT NULL AND m.room = p_room AND m.search_tsv @@ tsq
      AND (p_tags IS NULL OR m.tags @> p_tags)
    ORDER BY ts_rank_cd(m.search_tsv, tsq) DESC
    LIMIT k
  ), fused AS (
    SELECT coalesce(v.key, f.key) AS key, v.sim,
           coalesce(1.0 / (60 + v.rank), 0) + coalesce(1.0 / (60 + f.rank), 0) AS score
    FROM vec_ranked v FULL JOIN fts f ON f.key = v.key
  )
  SELECT f.key,
         coalesce(f.sim, 1 - (m.embedding <=> p_query_embedding))::double precision,
         f.score::double precision
  FROM fused f JOIN mycelium.memories m ON m.room = p_room AND m.key = f.key
  WHERE coalesce(p_min_similarity, 0) <= 0
     OR coalesce(f.sim, 1 - (m.embedding <=> p_query_embedding)) >= p_min_similarity
  ORDER BY f.score DESC, f.key
  LIMIT p_limit;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Followers of the change outbox (the markdown mirror): a stored position per follower, and
-- pruning of what every follower has passed.

CREATE OR REPLACE FUNCTION mycelium.register_follower(p_name text) RETURNS mycelium.followers
LANGUAGE plpgsql AS $$
DECLARE r mycelium.followers;
BEGIN
  INSERT INTO mycelium.followers (name) VALUES (p_name) ON CONFLICT (name) DO NOTHING;
  SELECT * INTO r FROM mycelium.followers WHERE name = p_name;
  RETURN r;
END
$$;

CREATE OR REPLACE FUNCTION mycelium.advance_follower(p_name text, p_tx xid8, p_seq bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE oldest record;
BEGIN
  UPDATE mycelium.followers SET tx = p_tx, seq = p_seq, updated_at = now()
  WHERE name = p_name AND (tx, seq) < (p_tx, p_seq);
  SELECT tx, seq INTO oldest FROM mycelium.followers ORDER BY tx, seq LIMIT 1;
  DELETE FROM mycelium.changes WHERE (tx, seq) <= (oldest.tx, oldest.seq);
END
$$;

-- ==== sql/links.sql ====
-- Links between memories: myc:// URIs, [[wikilinks]], ![[transclusions]] and typed relations in
-- frontmatter, parsed by the database on every write (trigger), so a link index can never drift
-- from the memories it describes, whoever wrote them.
--
--   myc://decisions/db                a URI, bare in prose or as [label](myc://decisions/db)
--   [[decisions/db]]                  the same edge, shorter
--   [[decisions/db#trade-offs|why]]   a section anchor and a label
--   ![[glossary/vector-store]]        transclusion: the target's text pulled in on /links/expand
--   supersedes: decisions/db-v1       frontmatter relations (supersedes, superseded-by, depends-on,
--                                     part-of, relates-to): a key, a myc:// URI, or a list of them
--
-- What is stored is only what the text says (memory_links, memory_anchors). Whether a link resolves
-- is decided when it is read (view link_edges), so a target written later resolves the link with no
-- rewrite of the source. Errors: cross_room, not_found, no_anchor, not_expandable.
--
-- One parser, used for both the index and the expansion: the stored `pos` of a transclusion is where
-- /links/expand splices the target's text in, so what counts as a marker is defined once, here.

-- ---------------------------------------------------------------------------------------------
-- Derived tables (written only by derive_links; a direct write is refused).

-- The relation keys of frontmatter, in the order their edges are listed.
CREATE OR REPLACE FUNCTION mycelium.link_relations() RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT ARRAY['supersedes', 'superseded-by', 'depends-on', 'part-of', 'relates-to']
$$;

CREATE TABLE mycelium.memory_links (
  room text NOT NULL,
  source_key text NOT NULL,
  ord integer NOT NULL,
  target text NOT NULL CHECK (target <> ''),
  kind text NOT NULL CHECK (kind IN ('uri', 'wikilink', 'transclusion', 'relation')),
  anchor text CHECK (anchor <> ''),
  label text,
  relation text CHECK (relation = ANY (mycelium.link_relations())),
  raw text NOT NULL,
  cross_room text,
  pos integer CHECK (pos >= 1),
  PRIMARY KEY (room, source_key, ord),
  FOREIGN KEY (room, source_key) REFERENCES mycelium.memories (room, key) ON DELETE CASCADE,
  CHECK ((kind = 'relation') = (relation IS NOT NULL)),
  CHECK ((kind = 'relation') = (pos IS NULL))
);
CREATE INDEX memory_links_backlinks ON mycelium.memory_links (room, target);
COMMENT ON TABLE mycelium.memory_links IS
  'Every link a memory''s text makes, in text order; derived by trigger from memories, never written directly.';
COMMENT ON COLUMN mycelium.memory_links.pos IS
  'Where raw starts in the memory''s body (characters, from 1); NULL for frontmatter relations.';
COMMENT ON COLUMN mycelium.memory_links.cross_room IS
  'The other room a myc://rooms/<room>/... link names; such a link never resolves here.';

-- The section anchors of a memory (slugs of its headings), for #anchor checks.
CREATE TABLE mycelium.memory_anchors (
  room text NOT NULL,
  key text NOT NULL,
  anchor text NOT NULL CHECK (anchor <> ''),
  level smallint NOT NULL CHECK (level BETWEEN 1 AND 6),
  line integer NOT NULL,
  PRIMARY KEY (room, key, anchor),
  FOREIGN KEY (room, key) REFERENCES mycelium.memories (room, key) ON DELETE CASCADE
);

-- ---------------------------------------------------------------------------------------------
-- The parser (pure functions: callable from psql to see what a text would link to).

-- A heading or an anchor as a URL fragment, GitHub-style: lower case, punctuation dropped, runs of
-- spaces become one hyphen ("Trade Offs" -> "trade-offs", "Why? (v2)" -> "why-v2", "Über" -> "über").
-- ASCII text (the common case) takes string functions; other text takes regular expressions with
-- the first Unicode-aware collation the server has (builtin pg_c_utf8 from PostgreSQL 17, else libc
-- C.utf8), so letters are Unicode letters whatever the database's locale; without one, non-ASCII
-- letters are dropped like punctuation. Both ways give the same slug for ASCII text.
DO $slug$
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
    CREATE OR REPLACE FUNCTION mycelium.link_slug(p_text text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
      SELECT CASE WHEN octet_length(p_text) = length(p_text) THEN
        -- whitespace becomes a space, other punctuation and control characters go, spaces join by "-"
        btrim(array_to_string(array_remove(string_to_array(translate(lower(p_text),
          E'\t\n\v\f\r!"#$%%&''()*+,./:;<=>?@[\\]^`{|}~' || %L, '     '), ' '), ''), '-'), '-')
      ELSE
        btrim(regexp_replace(regexp_replace(lower(btrim(p_text) %s), '[^[:alnum:][:space:]_-]', '', 'g'),
                             '[[:space:]]+', '-', 'g'), '-')
      END
    $$ $fn$,
    (SELECT string_agg(chr(c), '') FROM generate_series(1, 31) c WHERE c NOT BETWEEN 9 AND 13) || chr(127),
    coalesce(coll, ''));
END
$slug$;

-- A link target as a memory key: no myc:// scheme, no leading "/" or "./", no trailing ".md" or "/".
-- (String functions, not regular expressions: this runs for every link of every write.)
CREATE OR REPLACE FUNCTION mycelium.link_key(p_ref text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  k text := btrim(p_ref);
BEGIN
  IF starts_with(k, 'myc://') THEN
    k := substr(k, 7);
  END IF;
  WHILE starts_with(k, '/') OR starts_with(k, './') LOOP
    k := ltrim(substr(k, 2), '/');
  END LOOP;
  k := rtrim(k, '/');
  IF right(k, 3) = '.md' THEN
    k := rtrim(left(k, -3), '/');
  END IF;
  RETURN k;
END
$$;

-- The text with every code region blanked (same length, newlines kept) so that links and headings
-- inside code are not seen, and every position still points into the original text. The blank is
-- U+0001, a character no link can contain, so a link found in the blanked text reads the same in the
-- original. Fences: a line of ``` or ~~~ (3 or more, up to 3 spaces in) opens a block that a line of
-- at least as many of the same character closes (an unclosed fence runs to the end). Inline code: a
-- run of N backticks up to the next run of exactly N on the same line. Linear in the text's length:
-- each line is cut once into its backtick runs, and each run's partner is found by one backward scan.
-- String functions only: a regular expression per line would cost more than the rest together.
CREATE OR REPLACE FUNCTION mycelium.link_code_mask(p_body text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  blank constant text := chr(1);
  lines text[];
  line text;
  t text;
  fence_char text;
  fence_len integer;
  run integer;
  pieces text[];
  runs integer[];
  gaps text[];
  partner integer[];
  last_at integer[];
  parts text[];
  k integer;
  j integer;
  c integer;
  span integer;
BEGIN
  IF p_body IS NULL OR (strpos(p_body, '`') = 0 AND strpos(p_body, '~~~') = 0) THEN
    RETURN p_body;
  END IF;
  lines := string_to_array(p_body, E'\n');
  FOR i IN 1 .. coalesce(array_length(lines, 1), 0) LOOP
    line := lines[i];
    CONTINUE WHEN fence_char IS NULL AND strpos(line, '`') = 0 AND strpos(line, '~~~') = 0;
    t := ltrim(line, ' ');
    run := CASE WHEN length(line) - length(t) <= 3 AND left(t, 1) IN ('`', '~')
                THEN length(t) - length(ltrim(t, left(t, 1))) ELSE 0 END;
    IF fence_char IS NOT NULL THEN  -- inside a block: blank it; a long enough bare fence closes it
      lines[i] := repeat(blank, length(line));
      IF left(t, 1) = fence_char AND run >= fence_len AND btrim(substr(t, run + 1), E' \t\r') = '' THEN
        fence_char := NULL;
      END IF;
      CONTINUE;
    END IF;
    IF run >= 3 AND NOT (left(t, 1) = '`' AND strpos(substr(t, run + 1), '`') > 0) THEN
      fence_char := left(t, 1);  -- an opening fence (a backtick fence's info string has no backtick)
      fence_len := run;
      lines[i] := repeat(blank, length(line));
      CONTINUE;
    END IF;
    CONTINUE WHEN strpos(line, '`') = 0;
    -- the line as gaps and maximal backtick runs: gaps[1] runs[1] gaps[2] ... runs[k] gaps[k+1]
    pieces := string_to_array(line, '`');
    gaps := ARRAY[pieces[1]];
    runs := '{}';
    run := 0;
    FOR x IN 2 .. array_length(pieces, 1) LOOP
      run := run + 1;
      IF pieces[x] <> '' OR x = array_length(pieces, 1) THEN
        runs := array_append(runs, run);
        gaps := array_append(gaps, pieces[x]);
        run := 0;
      END IF;
    END LOOP;
    k := array_length(runs, 1);
    partner := array_fill(NULL::integer, ARRAY[k]);
    last_at := '{}';
    FOR x IN REVERSE k .. 1 LOOP  -- partner[x]: the next run as long as run x
      partner[x] := last_at[runs[x]];
      last_at[runs[x]] := x;
    END LOOP;
    parts := ARRAY[gaps[1]];
    j := 1;
    WHILE j <= k LOOP
      c := partner[j];
      IF c IS NULL THEN  -- no closing run: the backticks are literal
        parts := array_append(parts, repeat('`', runs[j]));
        parts := array_append(parts, gaps[j + 1]);
        j := j + 1;
      ELSE
        span := 0;
        FOR x IN j .. c LOOP
          span := span + runs[x] + CASE WHEN x > j THEN length(gaps[x]) ELSE 0 END;
        END LOOP;
        parts := array_append(parts, repeat(blank, span));
        parts := array_append(parts, gaps[c + 1]);
        j := c + 1;
      END IF;
    END LOOP;
    lines[i] := array_to_string(parts, '');
  END LOOP;
  RETURN array_to_string(lines, E'\n');
END
$$;

-- What a link body (the inside of [[...]], a URI, a relation value) points at, or NULL target when
-- it is not a link: blank, a directive ("[[word: ...]]" - a word, a colon and a space, as in
-- "[[mycelium: stance=accept]]"), or nothing left after normalising. "key#anchor|label".
-- myc://rooms/<room>/<key> names another room (cross_room); naming this room is a plain edge.
CREATE OR REPLACE FUNCTION mycelium.link_ref(
  p_room text, p_ref text,
  OUT target text, OUT anchor text, OUT label text, OUT cross_room text
) LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  inner_text text := btrim(coalesce(p_ref, ''), E' \t\r\n');
  bar integer;
  hash integer;
  m text[];
BEGIN
  IF inner_text = '' OR (strpos(inner_text, ':') > 0 AND (inner_text ~ '^[A-Za-z][A-Za-z0-9_-]*:[[:space:]]'
                                                           OR inner_text ~* '^mycelium[[:space:]]*:')) THEN
    RETURN;
  END IF;
  bar := strpos(inner_text, '|');
  IF bar > 0 THEN
    label := nullif(btrim(substr(inner_text, bar + 1)), '');
    inner_text := left(inner_text, bar - 1);
  END IF;
  hash := strpos(inner_text, '#');
  IF hash > 0 THEN
    anchor := nullif(mycelium.link_slug(substr(inner_text, hash + 1)), '');
    inner_text := left(inner_text, hash - 1);
  END IF;
  target := nullif(mycelium.link_key(inner_text), '');
  IF target IS NULL THEN
    anchor := NULL;
    label := NULL;
    RETURN;
  END IF;
  m := CASE WHEN starts_with(target, 'rooms/') THEN regexp_match(target, '^rooms/([^/]+)(/(.+))?$') END;
  IF m IS NOT NULL THEN
    IF m[1] = p_room AND m[3] IS NOT NULL THEN
      target := m[3];
    ELSE
      cross_room := m[1];
    END IF;
  END IF;
END
$$;

-- The one pattern for a link in text, tried left to right (leftmost match wins, so a URI inside a
-- wikilink or a markdown link is part of that one edge):
--   ![[...]] or [[...]]            (no brackets, newline or code inside)
--   [label](myc://...)
--   myc://...                      (a bare URI: runs to whitespace or a bracket or quote)
CREATE OR REPLACE FUNCTION mycelium.link_pattern() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $re$
  SELECT '!?\[\[[^][\n\u0001]*\]\]'
      || '|\[[^][\n\u0001]*\]\(myc://[^()[:space:]\u0001]*\)'
      || '|myc://[^][()<>"''`[:space:]\u0001]*'
$re$;

-- The links of a text whose code is already blanked (p_masked = link_code_mask(body)): body links
-- in text order, then frontmatter relations. One regex pass finds the matches; splitting on the same
-- pattern gives the text between them, and the running length of both is where each match starts.
-- A match holds no blanked character, so it is also the original text at that place.
CREATE OR REPLACE FUNCTION mycelium.parse_masked_links(p_room text, p_masked text, p_meta jsonb)
RETURNS TABLE (ord integer, target text, kind text, anchor text, label text, relation text,
               raw text, cross_room text, pos integer)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  WITH tokens AS (
    SELECT m[1] AS tok, n FROM regexp_matches(p_masked, mycelium.link_pattern(), 'g') WITH ORDINALITY AS t(m, n)
  ), gaps AS (
    SELECT g, n FROM regexp_split_to_table(p_masked, mycelium.link_pattern()) WITH ORDINALITY AS s(g, n)
  ), placed AS (
    SELECT t.n, t.tok,
           (sum(length(g.g) + length(t.tok)) OVER (ORDER BY t.n) - length(t.tok) + 1)::integer AS pos
    FROM tokens t JOIN gaps g ON g.n = t.n
  ), read AS (
    SELECT p.n, p.pos, c.kind, c.ref, c.md_label,
           CASE WHEN c.kind = 'uri' AND NOT starts_with(p.tok, '[') THEN c.ref ELSE p.tok END AS raw
    FROM placed p CROSS JOIN LATERAL (
      SELECT CASE WHEN starts_with(p.tok, '![[') THEN 'transclusion'
                  WHEN starts_with(p.tok, '[[') THEN 'wikilink' ELSE 'uri' END AS kind,
             CASE WHEN starts_with(p.tok, '![[') THEN substr(p.tok, 4, length(p.tok) - 5)
                  WHEN starts_with(p.tok, '[[') THEN substr(p.tok, 3, length(p.tok) - 4)
                  WHEN starts_with(p.tok, '[') THEN substring(p.tok FROM '\]\((.*)\)$')
                  ELSE rtrim(p.tok, '.,;:!?')  -- a sentence ends, and the URI with it
             END AS ref,
             CASE WHEN starts_with(p.tok, '[') AND NOT starts_with(p.tok, '[[')
                  THEN nullif(btrim(substring(p.tok FROM '^\[(.*)\]\(')), '') END AS md_label
    ) c
  ), links AS (
    SELECT 1 AS part, r.n AS n1, 0::bigint AS n2, r.kind, l.target, l.anchor,
           coalesce(l.label, r.md_label) AS label, NULL::text AS relation,
           r.raw, l.cross_room, r.pos
    FROM read r CROSS JOIN LATERAL mycelium.link_ref(p_room, r.ref) l
    WHERE l.target IS NOT NULL AND (r.kind <> 'uri' OR length(r.ref) > length('myc://'))
    UNION ALL
    SELECT 2, k.n, e.n, 'relation', l.target, l.anchor, l.label, k.rel, k.rel || ': ' || (e.v #>> '{}'),
           l.cross_room, NULL
    FROM unnest(mycelium.link_relations()) WITH ORDINALITY AS k(rel, n)
    CROSS JOIN LATERAL jsonb_array_elements(
      CASE jsonb_typeof(p_meta -> k.rel) WHEN 'array' THEN p_meta -> k.rel
                                         WHEN 'string' THEN jsonb_build_array(p_meta -> k.rel)
                                         ELSE '[]' END) WITH ORDINALITY AS e(v, n)
    CROSS JOIN LATERAL mycelium.link_ref(p_room, e.v #>> '{}') l
    WHERE jsonb_typeof(p_meta) = 'object' AND jsonb_typeof(e.v) = 'string' AND l.target IS NOT NULL
  )
  SELECT (row_number() OVER (ORDER BY part, n1, n2))::integer, target, kind, anchor, label, relation, raw,
         cross_room, pos
  FROM links
  ORDER BY part, n1, n2
$$;

-- Every link a memory makes, in text order: body links first (pos = where raw starts in the body),
-- then frontmatter relations. Code (fenced or inline) is never parsed.
CREATE OR REPLACE FUNCTION mycelium.parse_links(p_room text, p_body text, p_meta jsonb DEFAULT '{}')
RETURNS TABLE (ord integer, target text, kind text, anchor text, label text, relation text,
               raw text, cross_room text, pos integer)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT * FROM mycelium.parse_masked_links(p_room, mycelium.link_code_mask(p_body), p_meta)
$$;

-- The headings of a text whose code is blanked, in order: line number, level and anchor slug
-- (the heading's own text, closing #s dropped). A repeated slug gets "-1", "-2", ... as on GitHub;
-- an empty heading has slug '' (it has no anchor, but it still ends a section). Slugs are unique: a
-- heading whose slug an earlier one already took (literally "Foo 1" and a second "Foo") has none.
CREATE OR REPLACE FUNCTION mycelium.masked_outline(p_body text, p_masked text)
RETURNS TABLE (line integer, level integer, slug text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  WITH candidates AS (  -- lines starting with "#" after at most 3 spaces (string functions only)
    SELECT x.n::integer AS line, x.orig, length(x.masked) - length(ltrim(x.masked, ' ')) AS indent,
           ltrim(x.masked, ' ') AS t
    FROM unnest(string_to_array(p_body, E'\n'), string_to_array(p_masked, E'\n'))
         WITH ORDINALITY AS x(orig, masked, n)
    WHERE strpos(p_body, '#') > 0 AND starts_with(ltrim(x.masked, ' '), '#')
  ), heads AS (  -- 1 to 6 "#" then a space, a tab or the end: the text after them, trimmed
    SELECT c.line, c.level, btrim(substr(c.orig, c.indent + c.level + 1), E' \t\r') AS text
    FROM (SELECT candidates.*, length(t) - length(ltrim(t, '#')) AS level FROM candidates) c
    WHERE c.indent <= 3 AND c.level <= 6 AND substr(c.t, c.level + 1, 1) IN ('', ' ', E'\t', E'\r')
  ), titled AS (  -- without a closing run of "#" (one preceded by a space, or the whole text)
    SELECT h.line, h.level,
           mycelium.link_slug(CASE WHEN rtrim(h.text, '#') = '' THEN ''
                                   WHEN right(rtrim(h.text, '#'), 1) IN (' ', E'\t')
                                     THEN rtrim(rtrim(h.text, '#'), E' \t')
                                   ELSE h.text END) AS base
    FROM heads h
  ), numbered AS (
    SELECT t.line, t.level,
           CASE WHEN t.base = '' OR t.dup = 0 THEN t.base ELSE t.base || '-' || t.dup END AS slug
    FROM (SELECT titled.*, row_number() OVER (PARTITION BY base ORDER BY line) - 1 AS dup FROM titled) t
  )
  SELECT line, level, CASE WHEN row_number() OVER (PARTITION BY slug ORDER BY line) = 1 THEN slug ELSE '' END
  FROM numbered
  ORDER BY line
$$;

CREATE OR REPLACE FUNCTION mycelium.memory_outline(p_body text)
RETURNS TABLE (line integer, level integer, slug text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT * FROM mycelium.masked_outline(p_body, mycelium.link_code_mask(p_body))
$$;

-- The text under a heading: from the line after it up to the next heading of the same or a higher
-- level, trimmed. NULL anchor: the whole text, trimmed. NULL when there is no such anchor.
CREATE OR REPLACE FUNCTION mycelium.memory_section(p_body text, p_anchor text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  start integer;
  stop integer;
  lines text[];
BEGIN
  IF p_anchor IS NULL THEN
    RETURN btrim(p_body, E' \t\r\n');
  END IF;
  WITH o AS MATERIALIZED (SELECT * FROM mycelium.memory_outline(p_body))
  SELECT h.line, (SELECT min(o.line) FROM o WHERE o.line > h.line AND o.level <= h.level)
  INTO start, stop
  FROM o h WHERE h.slug = p_anchor;
  IF start IS NULL THEN
    RETURN NULL;
  END IF;
  lines := string_to_array(p_body, E'\n');
  RETURN btrim(array_to_string(lines[start + 1 : coalesce(stop - 1, array_length(lines, 1))], E'\n'),
               E' \t\r\n');
END
$$;

-- Transclusion is opt-in on the target: frontmatter expandable: true (the boolean, nothing else).
CREATE OR REPLACE FUNCTION mycelium.is_expandable(p_meta jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT coalesce(p_meta -> 'expandable' = 'true'::jsonb, false)
$$;

-- ---------------------------------------------------------------------------------------------
-- Derivation: the trigger on memories, and a rebuild for when the parser itself changes.

-- Replace one memory's links and anchors with what its current text says. It reads the text itself,
-- so no caller (the hub's role may execute it) can make the index say anything else.
CREATE OR REPLACE FUNCTION mycelium.derive_links(p_room text, p_key text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  m record;
  masked text;
BEGIN
  SELECT room, key, body, meta INTO m FROM mycelium.memories WHERE room = p_room AND key = p_key;
  PERFORM set_config('mycelium.deriving_links', 'on', true);
  DELETE FROM mycelium.memory_links WHERE room = p_room AND source_key = p_key;
  DELETE FROM mycelium.memory_anchors WHERE room = p_room AND key = p_key;
  IF m.key IS NOT NULL THEN
    masked := mycelium.link_code_mask(m.body);
    INSERT INTO mycelium.memory_links (room, source_key, ord, target, kind, anchor, label, relation, raw,
                                       cross_room, pos)
    SELECT m.room, m.key, l.ord, l.target, l.kind, l.anchor, l.label, l.relation, l.raw, l.cross_room, l.pos
    FROM mycelium.parse_masked_links(m.room, masked, m.meta) l;
    INSERT INTO mycelium.memory_anchors (room, key, anchor, level, line)
    SELECT m.room, m.key, o.slug, o.level, o.line
    FROM mycelium.masked_outline(m.body, masked) o WHERE o.slug <> '';
  END IF;
  PERFORM set_config('mycelium.deriving_links', '', true);
END
$$;

-- Whether a text may hold a link or a heading at all: most writes are prose, and skip the parser.
CREATE OR REPLACE FUNCTION mycelium.may_link(p_body text, p_meta jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT strpos(p_body, '[[') > 0 OR strpos(p_body, 'myc://') > 0 OR strpos(p_body, '#') > 0
      OR coalesce(p_meta ?| mycelium.link_relations(), false)
$$;

-- Re-derive when what links are made of changed: the body, or a relation key of the frontmatter
-- (a status field written on a board row changes neither).
CREATE OR REPLACE FUNCTION mycelium.memories_derive_links() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' THEN
    IF NEW.body IS NOT DISTINCT FROM OLD.body
       AND NOT EXISTS (SELECT 1 FROM unnest(mycelium.link_relations()) r
                       WHERE NEW.meta -> r IS DISTINCT FROM OLD.meta -> r) THEN
      RETURN NULL;
    END IF;
    IF mycelium.may_link(NEW.body, NEW.meta) OR mycelium.may_link(OLD.body, OLD.meta) THEN
      PERFORM mycelium.derive_links(NEW.room, NEW.key);
    END IF;
  ELSIF mycelium.may_link(NEW.body, NEW.meta) THEN
    PERFORM mycelium.derive_links(NEW.room, NEW.key);
  END IF;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER memories_derive_links_on_insert AFTER INSERT ON mycelium.memories
  FOR EACH ROW EXECUTE FUNCTION mycelium.memories_derive_links();
CREATE OR REPLACE TRIGGER memories_derive_links_on_update AFTER UPDATE ON mycelium.memories
  FOR EACH ROW WHEN (OLD.value IS DISTINCT FROM NEW.value OR OLD.meta IS DISTINCT FROM NEW.meta)
  EXECUTE FUNCTION mycelium.memories_derive_links();

-- The link tables say only what the memories say: rows arrive and leave through derive_links, or
-- leave with their memory (the foreign key's cascade, which runs inside the delete's own trigger).
-- Checked once per statement, so a write with many links pays for it once.
CREATE OR REPLACE FUNCTION mycelium.refuse_link_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('mycelium.deriving_links', true) = 'on'
     OR (TG_OP = 'DELETE' AND pg_trigger_depth() > 1) THEN
    RETURN NULL;
  END IF;
  PERFORM mycelium.refuse(409, 'derived_table',
    format('%s is derived from the memories'' text: write the memory instead (%s refused)',
           TG_TABLE_NAME, TG_OP));
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER memory_links_derived BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON mycelium.memory_links
  FOR EACH STATEMENT EXECUTE FUNCTION mycelium.refuse_link_write();
CREATE OR REPLACE TRIGGER memory_anchors_derived BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON mycelium.memory_anchors
  FOR EACH STATEMENT EXECUTE FUNCTION mycelium.refuse_link_write();

-- Re-derive every memory's links (one room, or all): run it after a change to the parser.
CREATE OR REPLACE FUNCTION mycelium.rebuild_links(p_room text DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  m record;
  n integer := 0;
BEGIN
  FOR m IN SELECT room, key FROM mycelium.memories WHERE p_room IS NULL OR room = p_room LOOP
    PERFORM mycelium.derive_links(m.room, m.key);
    n := n + 1;
  END LOOP;
  RETURN n;
END
$$;

-- The auditor's check that the index says what the memories say: every memory (of one room, or
-- all) whose stored links or anchors differ from a fresh parse of its text. Always empty, unless
-- someone went around the triggers.
CREATE OR REPLACE FUNCTION mycelium.link_drift(p_room text DEFAULT NULL) RETURNS TABLE (room text, key text)
LANGUAGE sql STABLE AS $$
  SELECT m.room, m.key
  FROM mycelium.memories m
  WHERE (p_room IS NULL OR m.room = p_room)
    AND (ARRAY(SELECT row(l.ord, l.target, l.kind, l.anchor, l.label, l.relation, l.raw, l.cross_room, l.pos)::text
               FROM mycelium.memory_links l WHERE l.room = m.room AND l.source_key = m.key ORDER BY l.ord)
         IS DISTINCT FROM
         ARRAY(SELECT row(p.ord, p.target, p.kind, p.anchor, p.label, p.relation, p.raw, p.cross_room, p.pos)::text
               FROM mycelium.parse_links(m.room, m.body, m.meta) p ORDER BY p.ord)
      OR ARRAY(SELECT row(a.anchor, a.level, a.line)::text
               FROM mycelium.memory_anchors a WHERE a.room = m.room AND a.key = m.key ORDER BY a.line)
         IS DISTINCT FROM
         ARRAY(SELECT row(o.slug, o.level, o.line)::text
               FROM mycelium.memory_outline(m.body) o WHERE o.slug <> '' ORDER BY o.line))
  ORDER BY m.room, m.key
$$;

-- ---------------------------------------------------------------------------------------------
-- Reading: links resolved against the room as it is now.

CREATE OR REPLACE VIEW mycelium.link_edges AS
SELECT l.room, l.source_key, l.ord, l.target, l.kind, l.anchor, l.label, l.relation, l.raw,
       l.cross_room, l.pos, e.error, e.error IS NULL AS resolved
FROM mycelium.memory_links l
LEFT JOIN mycelium.memories t ON t.room = l.room AND t.key = l.target AND l.cross_room IS NULL
CROSS JOIN LATERAL (
  SELECT CASE
    WHEN l.cross_room IS NOT NULL THEN 'cross_room'
    WHEN t.key IS NULL THEN 'not_found'
    WHEN l.anchor IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM mycelium.memory_anchors a
      WHERE a.room = l.room AND a.key = l.target AND a.anchor = l.anchor) THEN 'no_anchor'
    WHEN l.kind = 'transclusion' AND NOT mycelium.is_expandable(t.meta) THEN 'not_expandable'
  END AS error
) e;
COMMENT ON VIEW mycelium.link_edges IS
  'memory_links resolved now: error is cross_room, not_found, no_anchor, not_expandable or NULL (resolved).';

CREATE OR REPLACE FUNCTION mycelium.link_json(e mycelium.link_edges, p_with_source boolean DEFAULT true) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object('target', e.target, 'kind', e.kind, 'anchor', e.anchor, 'label', e.label,
                            'relation', e.relation, 'raw', e.raw, 'cross_room', e.cross_room,
                            'resolved', e.resolved, 'error', e.error)
         || CASE WHEN p_with_source THEN jsonb_build_object('source', e.source_key) ELSE '{}' END
$$;

-- One memory's links both ways: what it points at (in text order) and what points at it from
-- other memories of the room (cross-room links never do).
CREATE OR REPLACE FUNCTION mycelium.memory_links_of(p_room text, p_key text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
  PERFORM mycelium.require_room(p_room);
  RETURN jsonb_build_object(
    'key', p_key,
    'found', EXISTS (SELECT 1 FROM mycelium.memories WHERE room = p_room AND key = p_key),
    'outbound', coalesce((SELECT jsonb_agg(mycelium.link_json(e, false) ORDER BY e.ord)
                          FROM mycelium.link_edges e WHERE e.room = p_room AND e.source_key = p_key), '[]'),
    'backlinks', coalesce((SELECT jsonb_agg(mycelium.link_json(e) ORDER BY e.source_key, e.ord)
                           FROM mycelium.link_edges e
                           WHERE e.room = p_room AND e.target = p_key AND e.cross_room IS NULL
                             AND e.source_key <> p_key), '[]'));
END
$$;

-- The room's link graph: a node per memory (outbound = its links that stay in the room, inbound =
-- resolved links pointing at it), an edge per link. json, not jsonb: built once and sent as it is.
CREATE OR REPLACE FUNCTION mycelium.link_graph(p_room text) RETURNS json
LANGUAGE plpgsql STABLE AS $$
BEGIN
  PERFORM mycelium.require_room(p_room);
  RETURN (
    WITH edges AS MATERIALIZED (SELECT * FROM mycelium.link_edges WHERE room = p_room),
    outs AS (SELECT source_key AS key, count(*) FILTER (WHERE cross_room IS NULL) AS n
             FROM edges GROUP BY source_key),
    ins AS (SELECT target AS key, count(*) AS n FROM edges WHERE resolved GROUP BY target)
    SELECT json_build_object(
      'nodes', coalesce((
        SELECT json_agg(json_build_object('key', m.key, 'expandable', mycelium.is_expandable(m.meta),
                                          'outbound', coalesce(o.n, 0), 'inbound', coalesce(i.n, 0))
                        ORDER BY m.key)
        FROM mycelium.memories m
        LEFT JOIN outs o ON o.key = m.key LEFT JOIN ins i ON i.key = m.key
        WHERE m.room = p_room), '[]'),
      'edges', coalesce((
        SELECT json_agg(json_build_object('source', e.source_key, 'target', e.target, 'kind', e.kind,
                                          'anchor', e.anchor, 'relation', e.relation,
                                          'cross_room', e.cross_room, 'resolved', e.resolved,
                                          'error', e.error)
                        ORDER BY e.source_key, e.ord)
        FROM edges e), '[]'))
  );
END
$$;

-- Broken links, and the memories no resolved link reaches: orphans (nothing in, nothing out),
-- roots (nothing in, links out) and leaves (links in, nothing out).
CREATE OR REPLACE FUNCTION mycelium.link_integrity(p_room text) RETURNS json
LANGUAGE plpgsql STABLE AS $$
BEGIN
  PERFORM mycelium.require_room(p_room);
  RETURN (
    WITH edges AS MATERIALIZED (SELECT * FROM mycelium.link_edges WHERE room = p_room),
    degree AS (
      SELECT m.key,
             EXISTS (SELECT 1 FROM edges e WHERE e.target = m.key AND e.resolved) AS has_in,
             EXISTS (SELECT 1 FROM edges e WHERE e.source_key = m.key) AS has_out
      FROM mycelium.memories m WHERE m.room = p_room
    )
    SELECT json_build_object(
      'broken', coalesce((
        SELECT json_agg(json_build_object('source', e.source_key, 'target', e.target, 'kind', e.kind,
                                          'anchor', e.anchor, 'label', e.label, 'relation', e.relation,
                                          'raw', e.raw, 'cross_room', e.cross_room, 'resolved', e.resolved,
                                          'error', e.error)
                        ORDER BY e.source_key, e.ord)
        FROM edges e WHERE NOT e.resolved), '[]'),
      'orphans', coalesce((SELECT json_agg(key ORDER BY key) FROM degree WHERE NOT has_in AND NOT has_out), '[]'),
      'roots', coalesce((SELECT json_agg(key ORDER BY key) FROM degree WHERE NOT has_in AND has_out), '[]'),
      'leaves', coalesce((SELECT json_agg(key ORDER BY key) FROM degree WHERE has_in AND NOT has_out), '[]'),
      'total_memories', (SELECT count(*) FROM degree),
      'total_links', (SELECT count(*) FROM edges))
  );
END
$$;

-- A memory's body with each ![[...]] replaced by the target's text (or the #anchor section of it).
-- Depth 1: pulled text goes in as it is, markers inside it stay literal, so cycles cannot happen.
-- A marker that cannot be expanded stays exactly as written and is reported with its error. The
-- text is cut once at every ![[...]]; the ones the index holds (by position) are the transclusions,
-- the others (in code, degenerate, directives) stay as they are.
CREATE OR REPLACE FUNCTION mycelium.expand_memory(p_room text, p_key text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
  marker constant text := '!\[\[[^][\n\u0001]*\]\]';
  src text;
  result jsonb;
BEGIN
  PERFORM mycelium.require_room(p_room);
  SELECT m.body INTO src FROM mycelium.memories m WHERE m.room = p_room AND m.key = p_key;
  IF NOT FOUND THEN
    RETURN jsonb_build_object('key', p_key, 'rendered', '', 'expansions', '[]'::jsonb, 'found', false);
  END IF;
  WITH cut AS (
    SELECT g.n, g.before, x.m[1] AS marker,
           (sum(length(g.before) + coalesce(length(x.m[1]), 0)) OVER (ORDER BY g.n)
            - coalesce(length(x.m[1]), 0) + 1)::integer AS pos
    FROM regexp_split_to_table(src, marker) WITH ORDINALITY AS g(before, n)
    LEFT JOIN regexp_matches(src, marker, 'g') WITH ORDINALITY AS x(m, n) ON x.n = g.n
  ), pieces AS (
    SELECT c.n, c.before, c.marker, l.target, l.anchor, l.error,
           CASE WHEN l.resolved THEN mycelium.memory_section(t.body, l.anchor) END AS pulled
    FROM cut c
    LEFT JOIN mycelium.link_edges l
      ON l.room = p_room AND l.source_key = p_key AND l.kind = 'transclusion' AND l.pos = c.pos
    LEFT JOIN mycelium.memories t ON t.room = p_room AND t.key = l.target AND l.resolved
  )
  SELECT jsonb_build_object(
    'key', p_key,
    'rendered', string_agg(p.before || coalesce(p.pulled, p.marker, ''), '' ORDER BY p.n),
    'expansions', coalesce(jsonb_agg(jsonb_build_object(
        'target', p.target, 'anchor', p.anchor, 'raw', p.marker, 'expanded', p.pulled IS NOT NULL,
        'error', CASE WHEN p.pulled IS NULL THEN coalesce(p.error, 'no_anchor') END) ORDER BY p.n)
      FILTER (WHERE p.target IS NOT NULL), '[]'),
    'found', true)
  INTO result
  FROM pieces p;
  RETURN result;
END
$$;
