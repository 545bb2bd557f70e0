-- The board: tasks are memories in the live namespaces (decisions/ status/ work/ failed/), each
-- bound to its own thread (the memory's database-minted `episode`, write-once and unique per room:
-- see memories.sql). This file holds the board's vocabulary, the row <-> thread lookups, the
-- dependency edges and their cycle check, the notices a row raises when it moves, field writes and
-- the board verbs. Leases (claims) live in assignments.sql.
--
-- Rules the database keeps here, whoever writes (a hub replica, an engine, a person in psql):
--   * filing a board row raises one `filed` notice in the same transaction (trigger on insert);
--   * setting / clearing `blocked_by` raises `blocked` / `unblocked`;
--   * a row settled through its status (dismissed, promoted, a `status` written) raises `resolved`
--     with that status, as a lease's resolve raises it (assignments.sql), so what follows a row's
--     settling (a parent's completion: worker_engine.sql) does not depend on how it settled;
--   * a row becoming settled raises exactly one `unblocked` for each work/ row that now waits on
--     nothing (statement triggers over transition tables, so a multi-row UPDATE counts once);
--   * a `depends-on` edge that would close a cycle between board rows is refused (422);
--   * the lease fields are never frontmatter of a board row (refused, 422): leases live in
--     mycelium.assignments and change only through the assignment verbs.

-- ---------------------------------------------------------------------------------------------
-- Vocabulary (contracts/board-vocabulary.json; tests assert these against the file).

CREATE OR REPLACE FUNCTION mycelium.board_namespaces() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY['decisions', 'status', 'work', 'failed']
$$;
COMMENT ON FUNCTION mycelium.board_namespaces IS 'public inlined';

CREATE OR REPLACE FUNCTION mycelium.board_statuses() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY['open', 'in_review', 'resolved', 'dismissed']
$$;

CREATE OR REPLACE FUNCTION mycelium.board_kinds() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY['decision', 'blocked', 'review', 'action', 'concern', 'signal']
$$;

CREATE OR REPLACE FUNCTION mycelium.board_priorities() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY['urgent', 'high', 'normal', 'low']
$$;

CREATE OR REPLACE FUNCTION mycelium.settled_statuses() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY['resolved', 'dismissed']
$$;
COMMENT ON FUNCTION mycelium.settled_statuses IS 'public inlined';

-- The lease's own fields: never written as frontmatter, refused by /fields.
CREATE OR REPLACE FUNCTION mycelium.reserved_lease_fields() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY['assignment', 'owner', 'claimed_at', 'ttl_minutes', 'assignment_note', 'assignment_note_by']
$$;

CREATE OR REPLACE FUNCTION mycelium.is_board_key(p_key text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT p_key LIKE '%/%' AND split_part(p_key, '/', 1) = ANY (mycelium.board_namespaces())
$$;
COMMENT ON FUNCTION mycelium.is_board_key IS 'public inlined';

-- (A SQL-standard body: queries that name it inline it, and a stored body is read back instead of
-- being parsed again.)
CREATE OR REPLACE FUNCTION mycelium.is_assignable_key(p_key text) RETURNS boolean LANGUAGE sql IMMUTABLE
RETURN p_key LIKE 'work/_%';
COMMENT ON FUNCTION mycelium.is_assignable_key IS 'public inlined';

-- Everything the database believes about the board's closed sets, for the contract test.
CREATE OR REPLACE FUNCTION mycelium.board_vocabulary() RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_build_object(
    'statuses', to_jsonb(mycelium.board_statuses()),
    'kinds', to_jsonb(mycelium.board_kinds()),
    'priorities', to_jsonb(mycelium.board_priorities()),
    'live_namespaces', to_jsonb(mycelium.board_namespaces()),
    'settled_statuses', to_jsonb(mycelium.settled_statuses()),
    'reserved', to_jsonb(mycelium.reserved_lease_fields()),
    'assignable_namespaces', jsonb_build_array('work'),
    'notice_subkinds', jsonb_build_array('filed', 'claimed', 'released', 'resolved', 'blocked',
                                         'unblocked', 'expired', 'floor'))
$$;

-- ---------------------------------------------------------------------------------------------
-- Titles and slugs (a handle is checked by require_handle, handles.sql).

-- A row's title: frontmatter `title`, else the first non-empty body line without leading '#'.
-- (The body's line, when there is no frontmatter title, in PL/pgSQL: a loop over the lines that stops
-- at the first one costs less than a SQL function splitting the whole text into a set. memory_title
-- itself is one SQL expression, inlined where it is named, so a notice or a lease read with a
-- frontmatter title, as every task has, calls no function for it: two per claim or resolve.)
CREATE OR REPLACE FUNCTION mycelium.memory_body_title(p_text text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE line text;
BEGIN
  FOREACH line IN ARRAY string_to_array(coalesce(p_text, ''), E'\n') LOOP
    IF btrim(line) <> '' THEN
      RETURN nullif(btrim(regexp_replace(line, '^\s*#+\s*', '')), '');
    END IF;
  END LOOP;
  RETURN NULL;
END
$$;
COMMENT ON FUNCTION mycelium.memory_body_title IS 'public inlined';

CREATE OR REPLACE FUNCTION mycelium.memory_title(p_value jsonb, p_meta jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(nullif(btrim(p_meta ->> 'title'), ''), mycelium.memory_body_title(p_value ->> 'text'))
$$;
COMMENT ON FUNCTION mycelium.memory_title IS 'public read';

-- The key slug of a task title: lowercased, runs of anything but a-z0-9 become '-', trimmed,
-- at most 48 characters, 'task' when nothing is left. Deterministic: the same title lands on the
-- same row.
-- NULL when the title has no slug characters at all ('!!!', '🚀'): such a task gets a short unique key.
CREATE OR REPLACE FUNCTION mycelium.task_slug(p_title text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT nullif(btrim(left(btrim(regexp_replace(lower(coalesce(p_title, '')), '[^a-z0-9]+', '-', 'g'),
                               '-'), 48), '-'), '')
$$;

-- The key a new task of this title gets: work/<slug>, else work/<slug>-2, -3, … (the first not taken),
-- or work/task-<8 hex> for a title without slug characters. The caller holds the room's task-key lock.
CREATE OR REPLACE FUNCTION mycelium.free_task_key(p_room text, p_title text) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  base text := 'work/' || mycelium.task_slug(p_title);
  k text := base;
  n integer := 1;
BEGIN
  LOOP
    IF base IS NULL THEN
      k := 'work/task-' || left(md5(gen_random_uuid()::text), 8);
    END IF;
    EXIT WHEN NOT EXISTS (SELECT 1 FROM mycelium.memories WHERE room = p_room AND key = k);
    n := n + 1;
    k := base || '-' || n;
  END LOOP;
  RETURN k;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Row <-> thread lookups (the conversations feature uses them for floor notices and search).

CREATE OR REPLACE FUNCTION mycelium.episode_of(p_room text, p_key text) RETURNS text LANGUAGE sql STABLE AS $$
  SELECT episode FROM mycelium.memories WHERE room = p_room AND key = p_key
$$;

-- The row bound to a thread (a full URN, or its short id), with its title; no row when none is.
CREATE OR REPLACE FUNCTION mycelium.row_of_episode(p_room text, p_episode text)
RETURNS TABLE (key text, title text, board boolean) LANGUAGE sql STABLE AS $$
  SELECT m.key, mycelium.memory_title(m.value, m.meta), mycelium.is_board_key(m.key)
  FROM mycelium.memories m
  WHERE m.room = p_room
    AND m.episode = CASE WHEN p_episode LIKE '%:%' THEN p_episode
                         ELSE mycelium.episode_urn(p_room, p_episode) END
$$;
COMMENT ON FUNCTION mycelium.row_of_episode IS 'public read';

-- ---------------------------------------------------------------------------------------------
-- Dependencies: `depends-on` edges come from the links table (parsed from frontmatter by the
-- database on every write). A dependency is a prerequisite only while it is an existing, unsettled
-- board row; a context/ note or a missing key is a reference.

CREATE OR REPLACE VIEW mycelium.board_dependencies AS
  SELECT l.room, l.source_key AS key, l.target AS depends_on, min(l.ord) AS ord
  FROM mycelium.memory_links l
  WHERE l.kind = 'relation' AND l.relation = 'depends-on' AND l.cross_room IS NULL
  GROUP BY l.room, l.source_key, l.target;

-- Settled: status resolved or dismissed, or the lease resolved.
CREATE OR REPLACE FUNCTION mycelium.row_settled(p_meta jsonb, p_lease_state text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(p_meta ->> 'status' = ANY (mycelium.settled_statuses()), false)
      OR coalesce(p_lease_state = 'resolved', false)
$$;
COMMENT ON FUNCTION mycelium.row_settled IS 'public inlined';

-- Refuse a depends-on edge that closes a cycle between board rows. Edges are checked one room at
-- a time under a transaction advisory lock, so two writers cannot each add half of a cycle.
-- The search visits each edge once: `reach` holds (row, the row it was reached from), and UNION
-- drops a pair already seen, so a graph where many paths share rows (each row depending on the two
-- before it) costs its edges, not its paths. When the new edge's source is reached, one path back
-- to the target is read off the `via` pointers (the graph before the edge has no cycle, so the walk
-- ends at the target; it never revisits a row in any case).
CREATE OR REPLACE FUNCTION mycelium.memory_links_no_dependency_cycle() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  loop_path text[];
BEGIN
  IF NEW.cross_room IS NOT NULL OR NOT mycelium.is_board_key(NEW.source_key)
     OR NOT mycelium.is_board_key(NEW.target) THEN
    RETURN NULL;
  END IF;
  PERFORM pg_advisory_xact_lock(hashtextextended('mycelium.depends-on:' || NEW.room, 0));
  IF NEW.target = NEW.source_key THEN
    loop_path := ARRAY[NEW.source_key, NEW.source_key];
  ELSE
    WITH RECURSIVE reach (k, via) AS (
      SELECT NEW.target, NULL::text
      UNION
      SELECT d.depends_on, r.k
      FROM reach r
      JOIN mycelium.board_dependencies d ON d.room = NEW.room AND d.key = r.k
      WHERE mycelium.is_board_key(d.depends_on) AND r.k <> NEW.source_key
    ), back (k, path) AS (
      SELECT NEW.source_key, ARRAY[NEW.source_key]
      WHERE EXISTS (SELECT FROM reach WHERE reach.k = NEW.source_key)
      UNION ALL
      SELECT p.via, p.via || b.path
      FROM back b
      CROSS JOIN LATERAL (SELECT r.via FROM reach r WHERE r.k = b.k AND r.via IS NOT NULL
                          ORDER BY r.via LIMIT 1) p
      WHERE b.k <> NEW.target AND NOT p.via = ANY (b.path)
    )
    SELECT NEW.source_key || path INTO loop_path FROM back WHERE k = NEW.target;
  END IF;
  IF loop_path IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'dependency_cycle',
      format('%L cannot depend on %L: that closes a cycle (%s)', NEW.source_key, NEW.target,
             array_to_string(loop_path, ' -> ')),
      jsonb_build_object('key', NEW.source_key, 'depends_on', NEW.target, 'cycle', to_jsonb(loop_path)));
  END IF;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER t70_memory_links_no_dependency_cycle AFTER INSERT ON mycelium.memory_links
  FOR EACH ROW WHEN (NEW.kind = 'relation' AND NEW.relation = 'depends-on')
  EXECUTE FUNCTION mycelium.memory_links_no_dependency_cycle();

-- ---------------------------------------------------------------------------------------------
-- Notices a board row raises. Every notice carries key, title and episode (the row's thread).

CREATE OR REPLACE FUNCTION mycelium.row_notice(p_room text, p_subkind text, p_key text, p_value jsonb, p_meta jsonb,
                                    p_episode text, p_data jsonb DEFAULT '{}')
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.post_notice(p_room, p_subkind, p_key,
    jsonb_build_object('title', mycelium.memory_title(p_value, p_meta), 'episode', p_episode)
    || coalesce(p_data, '{}'));
END
$$;

-- Raise `unblocked` for every unsettled work/ row that depended on one of p_settled and now waits
-- on nothing. Called once per statement with every row that became settled in it.
CREATE OR REPLACE FUNCTION mycelium.raise_unblocked(p_room text, p_settled text[], p_by text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  dependent text;
  m mycelium.memories;
  lease_state text;
  n integer := 0;
BEGIN
  -- the dependents, found from the settled rows' backlinks (an index scan, however big the board)
  FOR dependent IN
    SELECT DISTINCT l.source_key FROM mycelium.memory_links l
    WHERE l.room = p_room AND l.target = ANY (p_settled) AND l.kind = 'relation'
      AND l.relation = 'depends-on' AND l.cross_room IS NULL AND mycelium.is_assignable_key(l.source_key)
    ORDER BY 1
  LOOP
    SELECT * INTO m FROM mycelium.memories WHERE room = p_room AND key = dependent;
    CONTINUE WHEN NOT FOUND;
    SELECT a.state INTO lease_state FROM mycelium.assignments a WHERE a.room = p_room AND a.key = dependent;
    CONTINUE WHEN mycelium.row_settled(m.meta, lease_state)
               OR cardinality(mycelium.waiting_on(p_room, dependent)) > 0;
    PERFORM mycelium.row_notice(p_room, 'unblocked', dependent, m.value, m.meta, m.episode,
                                jsonb_build_object('by', p_by, 'after', to_jsonb(p_settled)));
    n := n + 1;
  END LOOP;
  RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION mycelium.board_rows_filed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
  FOR r IN SELECT * FROM new_rows WHERE mycelium.is_board_key(key) ORDER BY key LOOP
    PERFORM mycelium.row_notice(r.room, 'filed', r.key, r.value, r.meta, r.episode,
      jsonb_build_object('kind', r.meta ->> 'kind', 'assignee', r.meta ->> 'assignee', 'by', r.created_by));
  END LOOP;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER t90_board_rows_filed AFTER INSERT ON mycelium.memories
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mycelium.board_rows_filed();

CREATE OR REPLACE FUNCTION mycelium.board_rows_moved() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  r record;
  g record;
BEGIN
  FOR r IN
    SELECT n.room, n.key, n.value, n.meta, n.episode, n.updated_by,
           o.meta ->> 'blocked_by' AS was_blocked, n.meta ->> 'blocked_by' AS blocked
    FROM new_rows n JOIN old_rows o ON o.room = n.room AND o.key = n.key
    WHERE mycelium.is_board_key(n.key)
      AND (o.meta ->> 'blocked_by') IS DISTINCT FROM (n.meta ->> 'blocked_by')
    ORDER BY n.room, n.key
  LOOP
    IF r.blocked IS NOT NULL THEN
      PERFORM mycelium.row_notice(r.room, 'blocked', r.key, r.value, r.meta, r.episode,
                                  jsonb_build_object('by', r.updated_by, 'blocked_by', r.blocked));
    ELSE
      PERFORM mycelium.row_notice(r.room, 'unblocked', r.key, r.value, r.meta, r.episode,
                                  jsonb_build_object('by', r.updated_by, 'was_blocked_by', r.was_blocked));
    END IF;
  END LOOP;

  -- the rows this statement settled: those settled through their status (dismissed, promoted, a
  -- status field written) raise `resolved`, as a lease's resolve says it (their status and who set
  -- it); then what waited on them may move
  FOR g IN
    SELECT n.room, array_agg(n.key ORDER BY n.key) AS keys, min(n.updated_by) AS actor
    FROM new_rows n
    JOIN old_rows o ON o.room = n.room AND o.key = n.key
    LEFT JOIN mycelium.assignments a ON a.room = n.room AND a.key = n.key
    WHERE mycelium.is_board_key(n.key)
      AND mycelium.row_settled(n.meta, a.state) AND NOT mycelium.row_settled(o.meta, a.state)
    GROUP BY n.room
  LOOP
    FOR r IN SELECT n.room, n.key, n.value, n.meta, n.episode, n.updated_by FROM new_rows n
             WHERE n.room = g.room AND n.key = ANY (g.keys) ORDER BY n.key LOOP
      PERFORM mycelium.row_notice(r.room, 'resolved', r.key, r.value, r.meta, r.episode,
        jsonb_build_object('by', r.updated_by, 'status', r.meta ->> 'status',
                           'note', format('%s by @%s', r.meta ->> 'status', r.updated_by)));
    END LOOP;
    PERFORM mycelium.raise_unblocked(g.room, g.keys, g.actor);
  END LOOP;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER t95_board_rows_moved AFTER UPDATE ON mycelium.memories
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
  EXECUTE FUNCTION mycelium.board_rows_moved();

-- The lease fields are not frontmatter of a board row: whoever writes them there (the memory
-- route, /fields, a plain UPDATE) is refused, so no write can forge a lease.
CREATE OR REPLACE FUNCTION mycelium.board_rows_no_lease_fields() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE found text[];
BEGIN
  SELECT array_agg(k ORDER BY k) INTO found
  FROM jsonb_object_keys(NEW.meta) k
  WHERE k = ANY (mycelium.reserved_lease_fields())
    AND (TG_OP = 'INSERT' OR (NEW.meta -> k) IS DISTINCT FROM (OLD.meta -> k));
  IF found IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'reserved_fields',
      format('%s %s reserved for assignments: a lease changes only through claim, release, resolve '
             'and renew', array_to_string(found, ', '), CASE WHEN cardinality(found) = 1 THEN 'is' ELSE 'are' END),
      jsonb_build_object('key', NEW.key, 'reserved', to_jsonb(found)));
  END IF;
  RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER t10_board_rows_no_lease_fields BEFORE INSERT OR UPDATE OF meta ON mycelium.memories
  FOR EACH ROW WHEN (mycelium.is_board_key(NEW.key))
  EXECUTE FUNCTION mycelium.board_rows_no_lease_fields();

-- ---------------------------------------------------------------------------------------------
-- The dependency gate setting: mycelium.config 'board.dependency_gate' (per room, else hub-wide),
-- off by default.

CREATE OR REPLACE FUNCTION mycelium.dependency_gate_on(p_room text) RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT coalesce(mycelium.config_value('board.dependency_gate', p_room) = 'true'::jsonb, false)
$$;
COMMENT ON FUNCTION mycelium.dependency_gate_on IS 'public read';

CREATE OR REPLACE FUNCTION mycelium.set_dependency_gate(p_on boolean, p_room text DEFAULT '', p_by text DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.operator_only('set_dependency_gate');
  IF coalesce(p_room, '') <> '' THEN
    PERFORM mycelium.require_room(p_room);
  END IF;
  PERFORM mycelium.set_config('board.dependency_gate', to_jsonb(p_on), coalesce(p_room, ''),
                              mycelium.author(p_by, 'handle'));
  RETURN mycelium.dependency_gate_on(nullif(p_room, ''));
END
$$;
COMMENT ON FUNCTION mycelium.set_dependency_gate IS 'public write';

-- ---------------------------------------------------------------------------------------------
-- Field writes: frontmatter of one existing memory; a JSON null clears a field; prose, tags and
-- the vector are untouched; version +1. Lease fields are refused (all of the write, 422).

CREATE OR REPLACE FUNCTION mycelium.write_fields(p_room text, p_key text, p_by text, p_fields jsonb)
RETURNS mycelium.memories LANGUAGE plpgsql AS $$
DECLARE
  by_handle text;
  cur mycelium.memories;
  bad text[];
  f record;
  allowed text[];
BEGIN
  PERFORM mycelium.require_room(p_room);
  by_handle := mycelium.author(p_by, 'handle');
  IF by_handle IS NULL OR btrim(by_handle) = '' THEN
    PERFORM mycelium.refuse(422, 'missing_author', 'a field write names who writes it (handle)');
  END IF;
  IF p_fields IS NULL OR jsonb_typeof(p_fields) <> 'object' OR p_fields = '{}'::jsonb THEN
    PERFORM mycelium.refuse(422, 'empty_fields', 'fields is empty: name at least one field to write',
                            jsonb_build_object('key', p_key));
  END IF;
  SELECT array_agg(k ORDER BY k) INTO bad FROM jsonb_object_keys(p_fields) k
  WHERE k = ANY (mycelium.reserved_lease_fields());
  IF bad IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'reserved_fields',
      format('%s %s reserved for assignments: use claim, release, resolve or renew; nothing was written',
             array_to_string(bad, ', '), CASE WHEN cardinality(bad) = 1 THEN 'is' ELSE 'are' END),
      jsonb_build_object('key', p_key, 'reserved', to_jsonb(bad)));
  END IF;
  SELECT array_agg(k ORDER BY k) INTO bad FROM jsonb_object_keys(p_fields) k
  WHERE k = ANY (mycelium.managed_memory_keys());
  IF bad IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'managed_fields',
      format('%s %s kept by the store and cannot be written', array_to_string(bad, ', '),
             CASE WHEN cardinality(bad) = 1 THEN 'is' ELSE 'are' END),
      jsonb_build_object('key', p_key, 'managed', to_jsonb(bad)));
  END IF;
  IF mycelium.is_board_key(p_key) THEN
    FOR f IN SELECT * FROM jsonb_each(p_fields) WHERE key IN ('status', 'kind', 'priority') LOOP
      CONTINUE WHEN jsonb_typeof(f.value) = 'null';
      allowed := CASE f.key WHEN 'status' THEN mycelium.board_statuses()
                            WHEN 'kind' THEN mycelium.board_kinds() ELSE mycelium.board_priorities() END;
      IF jsonb_typeof(f.value) <> 'string' OR NOT (f.value #>> '{}') = ANY (allowed) THEN
        PERFORM mycelium.refuse(422, 'invalid_field_value',
          format('%s must be one of %s, not %s', f.key, array_to_string(allowed, ', '), f.value::text),
          jsonb_build_object('key', p_key, 'field', f.key, 'allowed', to_jsonb(allowed)));
      END IF;
    END LOOP;
  END IF;
  SELECT * INTO cur FROM mycelium.memories WHERE room = p_room AND key = p_key FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse(404, 'memory_not_found', format('no memory %L in room %L', p_key, p_room),
                            jsonb_build_object('room', p_room, 'key', p_key));
  END IF;
  RETURN mycelium.write_memory(p_room, p_key, cur.value, by_handle, NULL, p_fields, cur.content_text,
                               NULL, NULL, false);
END
$$;
COMMENT ON FUNCTION mycelium.write_fields IS 'public write';

-- The user's fields of a memory: its frontmatter without the lease fields.
CREATE OR REPLACE FUNCTION mycelium.read_fields(p_room text, p_key text) RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE m mycelium.memories;
BEGIN
  SELECT * INTO m FROM mycelium.memories WHERE room = p_room AND key = p_key;
  IF NOT FOUND THEN
    PERFORM mycelium.require_room(p_room);
    PERFORM mycelium.refuse(404, 'memory_not_found', format('no memory %L in room %L', p_key, p_room),
                            jsonb_build_object('room', p_room, 'key', p_key));
  END IF;
  RETURN m.meta - mycelium.reserved_lease_fields();
END
$$;
COMMENT ON FUNCTION mycelium.read_fields IS 'public read';

-- ---------------------------------------------------------------------------------------------
-- Board verbs over fields (their notices come from the triggers above).

CREATE OR REPLACE FUNCTION mycelium.require_board_row(p_room text, p_key text) RETURNS mycelium.memories
LANGUAGE plpgsql STABLE AS $$
DECLARE m mycelium.memories;
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF NOT mycelium.is_board_key(coalesce(p_key, '')) THEN
    PERFORM mycelium.refuse(422, 'not_a_board_row',
      format('%L is not a board row: board rows live in %s', p_key,
             array_to_string(ARRAY(SELECT n || '/' FROM unnest(mycelium.board_namespaces()) n), ' ')),
      jsonb_build_object('key', p_key));
  END IF;
  SELECT * INTO m FROM mycelium.memories WHERE room = p_room AND key = p_key;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse(404, 'memory_not_found', format('no memory %L in this room', p_key),
                            jsonb_build_object('room', p_room, 'key', p_key));
  END IF;
  RETURN m;
END
$$;

CREATE OR REPLACE FUNCTION mycelium.block_row(p_room text, p_key text, p_by text, p_on text)
RETURNS mycelium.memories LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.require_board_row(p_room, p_key);
  IF p_on IS NULL OR btrim(p_on) = '' THEN
    PERFORM mycelium.refuse(422, 'missing_blocker', 'say what the row is blocked on (e.g. "#502")',
                            jsonb_build_object('key', p_key));
  END IF;
  RETURN mycelium.write_fields(p_room, p_key, mycelium.require_handle(mycelium.author(p_by)),
                               jsonb_build_object('blocked_by', btrim(p_on)));
END
$$;
COMMENT ON FUNCTION mycelium.block_row IS 'public write';

CREATE OR REPLACE FUNCTION mycelium.unblock_row(p_room text, p_key text, p_by text)
RETURNS mycelium.memories LANGUAGE plpgsql AS $$
DECLARE m mycelium.memories := mycelium.require_board_row(p_room, p_key);
BEGIN
  IF NOT m.meta ? 'blocked_by' THEN
    PERFORM mycelium.refuse(409, 'not_blocked', format('%L is not blocked', p_key),
                            jsonb_build_object('key', p_key));
  END IF;
  RETURN mycelium.write_fields(p_room, p_key, mycelium.require_handle(mycelium.author(p_by)),
                               '{"blocked_by": null}');
END
$$;
COMMENT ON FUNCTION mycelium.unblock_row IS 'public write';

CREATE OR REPLACE FUNCTION mycelium.dismiss_row(p_room text, p_key text, p_by text)
RETURNS mycelium.memories LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.require_board_row(p_room, p_key);
  RETURN mycelium.write_fields(p_room, p_key, mycelium.require_handle(mycelium.author(p_by)),
                               '{"status": "dismissed"}');
END
$$;
COMMENT ON FUNCTION mycelium.dismiss_row IS 'public write';

-- Promote: the row is owned elsewhere now (an issue, a PR); it is resolved here and says where.
CREATE OR REPLACE FUNCTION mycelium.promote_row(p_room text, p_key text, p_by text, p_url text DEFAULT NULL)
RETURNS mycelium.memories LANGUAGE plpgsql AS $$
DECLARE h text := mycelium.require_handle(mycelium.author(p_by));
BEGIN
  PERFORM mycelium.require_board_row(p_room, p_key);
  RETURN mycelium.write_fields(p_room, p_key, h,
    jsonb_build_object('status', 'resolved', 'promoted_by', h)
    || CASE WHEN nullif(btrim(p_url), '') IS NOT NULL THEN jsonb_build_object('upstream_url', btrim(p_url))
            ELSE '{}' END);
END
$$;
COMMENT ON FUNCTION mycelium.promote_row IS 'public write';

-- ---------------------------------------------------------------------------------------------
-- Tasks: file a row in work/ (status open, kind action), optionally for someone and under a parent.

-- A task never lands on an existing row: a title takes the first free key (free_task_key), an explicit
-- key that exists is refused (409 task_exists). Filers of one room take turns on a transaction lock,
-- so two filing the same title at once get two keys; the write itself is create-only (base version
-- 0), so even a plain write_memory racing in cannot be overwritten. depends-on is written with the
-- row, in its first version.
CREATE OR REPLACE FUNCTION mycelium.create_task(p_room text, p_title text, p_by text, p_key text DEFAULT NULL,
                                     p_assignee text DEFAULT NULL, p_parent text DEFAULT NULL,
                                     p_depends_on text[] DEFAULT NULL)
RETURNS mycelium.memories LANGUAGE plpgsql AS $$
DECLARE
  by_handle text;
  k text := nullif(btrim(p_key), '');
  deps text[];
  meta jsonb := jsonb_build_object('status', 'open', 'kind', 'action');
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF p_title IS NULL OR btrim(p_title) = '' THEN
    PERFORM mycelium.refuse(422, 'missing_title', 'a task needs a title');
  END IF;
  by_handle := mycelium.require_handle(mycelium.author(p_by));
  IF k IS NOT NULL AND NOT mycelium.is_board_key(k) THEN
    PERFORM mycelium.refuse(422, 'not_a_board_row',
      format('%L is not a board row: a task lives in work/ (or decisions/ status/ failed/)', k),
      jsonb_build_object('key', k));
  END IF;
  PERFORM pg_advisory_xact_lock(hashtextextended('mycelium.task-key:' || p_room, 0));
  IF k IS NULL THEN
    k := mycelium.free_task_key(p_room, p_title);
  ELSIF EXISTS (SELECT 1 FROM mycelium.memories WHERE room = p_room AND key = k) THEN
    PERFORM mycelium.refuse(409, 'task_exists',
      format('%L already exists in room %L: file the task under another key, or leave the key out', k, p_room),
      jsonb_build_object('room', p_room, 'key', k));
  END IF;
  IF nullif(btrim(p_assignee), '') IS NOT NULL THEN
    meta := meta || jsonb_build_object('assignee', mycelium.require_handle(p_assignee, 'assignee'));
  END IF;
  IF nullif(btrim(p_parent), '') IS NOT NULL THEN
    IF NOT EXISTS (SELECT 1 FROM mycelium.memories WHERE room = p_room AND key = btrim(p_parent)) THEN
      PERFORM mycelium.refuse(404, 'parent_not_found',
        format('No task %L in room %L to parent to', btrim(p_parent), p_room),
        jsonb_build_object('room', p_room, 'parent', btrim(p_parent)));
    END IF;
    IF btrim(p_parent) = k THEN
      PERFORM mycelium.refuse(422, 'invalid_parent', 'a task cannot be its own parent',
                              jsonb_build_object('key', k));
    END IF;
    meta := meta || jsonb_build_object('part-of', btrim(p_parent));
  END IF;
  SELECT array_agg(d ORDER BY o) INTO deps
  FROM (SELECT DISTINCT ON (btrim(d)) btrim(d) AS d, o FROM unnest(p_depends_on) WITH ORDINALITY u(d, o)
        WHERE nullif(btrim(d), '') IS NOT NULL ORDER BY btrim(d), o) x;
  IF k = ANY (deps) THEN
    PERFORM mycelium.refuse(422, 'invalid_dependency', format('%L cannot depend on itself', k),
                            jsonb_build_object('key', k));
  END IF;
  IF deps IS NOT NULL THEN
    meta := meta || jsonb_build_object('depends-on', to_jsonb(deps));
  END IF;
  RETURN mycelium.write_memory(p_room, k, jsonb_build_object('text', '# ' || btrim(p_title) || E'\n'),
                               by_handle, NULL, meta, NULL, 0);
END
$$;
COMMENT ON FUNCTION mycelium.create_task IS 'public write';
