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
COMMENT ON FUNCTION mycelium.defer_wakes IS 'public write';

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
COMMENT ON FUNCTION mycelium.episode_urn IS 'public inlined';

CREATE OR REPLACE FUNCTION mycelium.episode_short_id(p_episode text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT regexp_replace(p_episode, '^.*:', '') $$;
COMMENT ON FUNCTION mycelium.episode_short_id IS 'public inlined';

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
COMMENT ON FUNCTION mycelium.actor IS 'public read';

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
CREATE OR REPLACE TRIGGER t55_memories_before_insert BEFORE INSERT ON mycelium.memories
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
CREATE OR REPLACE TRIGGER t60_memories_before_update BEFORE UPDATE ON mycelium.memories
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
CREATE OR REPLACE TRIGGER t75_memories_after_write AFTER INSERT OR UPDATE ON mycelium.memories
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
CREATE OR REPLACE TRIGGER t70_memories_after_delete AFTER DELETE ON mycelium.memories
  FOR EACH ROW EXECUTE FUNCTION mycelium.memories_after_delete();

CREATE OR REPLACE FUNCTION mycelium.rooms_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO mycelium.changes (room, key, op) VALUES (OLD.name, NULL, 'room_delete');
  PERFORM mycelium.wake_hint('mycelium_changes', OLD.name);
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER t80_rooms_after_delete AFTER DELETE ON mycelium.rooms
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
CREATE OR REPLACE TRIGGER t55_memory_versions_append_only BEFORE UPDATE OR DELETE ON mycelium.memory_versions
  FOR EACH ROW EXECUTE FUNCTION mycelium.refuse_history_change();

CREATE OR REPLACE FUNCTION mycelium.refuse_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.refuse(409, 'append_only', format('%s is append-only: TRUNCATE refused', TG_TABLE_NAME));
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER t05_memory_versions_no_truncate BEFORE TRUNCATE ON mycelium.memory_versions
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
-- The author is the declared actor (mycelium.author), else p_by.
CREATE OR REPLACE FUNCTION mycelium.write_memory(
  p_room text, p_key text, p_value jsonb, p_by text,
  p_tags text[] DEFAULT NULL, p_meta jsonb DEFAULT NULL, p_content_text text DEFAULT NULL,
  p_base_version integer DEFAULT NULL, p_embedding vector DEFAULT NULL, p_embed boolean DEFAULT true
) RETURNS mycelium.memories LANGUAGE plpgsql AS $$
DECLARE
  problem text := mycelium.memory_key_problem(p_key);
  by_handle text;
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
  by_handle := mycelium.author(p_by, 'created_by');
  IF by_handle IS NULL OR btrim(by_handle) = '' THEN
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
  PERFORM set_config('mycelium.actor', by_handle, true);
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
        updated_by = by_handle,
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
            coalesce(p_tags, '{}'), p_content_text, by_handle, by_handle, p_embedding,
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
COMMENT ON FUNCTION mycelium.write_memory IS 'public write';

CREATE OR REPLACE FUNCTION mycelium.delete_memory(p_room text, p_key text, p_by text DEFAULT NULL)
RETURNS mycelium.memories LANGUAGE plpgsql AS $$
DECLARE
  by_handle text := mycelium.author(p_by, 'by');
  r mycelium.memories;
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF by_handle IS NOT NULL THEN PERFORM set_config('mycelium.actor', by_handle, true); END IF;
  DELETE FROM mycelium.memories WHERE room = p_room AND key = p_key RETURNING * INTO r;
  IF r.key IS NULL THEN
    PERFORM mycelium.refuse(404, 'memory_not_found', format('no memory %L in room %L', p_key, p_room),
                            jsonb_build_object('room', p_room, 'key', p_key));
  END IF;
  RETURN r;
END
$$;
COMMENT ON FUNCTION mycelium.delete_memory IS 'public write';

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
COMMENT ON FUNCTION mycelium.set_embedding IS 'public write';

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
COMMENT ON FUNCTION mycelium.search_memories IS 'public read';

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
COMMENT ON FUNCTION mycelium.register_follower IS 'public write';

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
COMMENT ON FUNCTION mycelium.advance_follower IS 'public write';
