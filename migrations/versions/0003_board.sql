-- Frozen: the definitions revision 0003_board applied when it was released (0.1.0).
-- Never edit this file: change sql/ and, for tables, add a new revision.

-- ==== sql/messages.sql ====
-- The timeline: one append-only table for a room's channel and every thread in it.
--
-- A message's place is its `position`, allocated per room under the room's counter row lock, so
-- positions are gapless and in commit order inside a room: a reader holding "everything up to N"
-- can never later find an N-1 that committed late. Every insert (through a verb or a plain INSERT)
-- gets its position here, and NOTIFY carries only a wake hint (room and position; sent by the
-- writer after its commit when it asked to, see mycelium.wake_hint in memories.sql).
--
-- The position counter row stays locked from the insert until the commit, so in one room every
-- writer waits for the previous one's commit: a verb appends its notice as late as it can, and
-- what runs on every insert (the triggers here and in the files that extend this table) is kept
-- cheap for the rows it cannot apply to (a notice has no prose to parse). The hot verbs (post_notice,
-- post_message, reply, take_next, claim/release/resolve_task) run with plan_cache_mode =
-- force_generic_plan: their statements are keyed lookups whose generic plans are the right ones,
-- and without it PostgreSQL plans again, on every call, each statement whose parameters make a
-- custom plan look cheaper (an array it could unnest, a position it could estimate).
--
-- Shape of a row = the L9 envelope of contracts/message-envelope.json, in typed columns:
--   kind/subkind (header), episode (thread URN; the room's own channel is …:<room>:live),
--   sender (first actor) and sender_role, recipients (the other actors), parents (message ids),
--   payload_type and payload (payload.type / payload.data), content (the prose).
-- The conversations feature adds the write gate (floors, frozen rosters), mentions and cursors.

CREATE TABLE mycelium.message_positions (
  room text PRIMARY KEY REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  last bigint NOT NULL DEFAULT 0
);

CREATE OR REPLACE FUNCTION mycelium.live_episode(p_room text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT mycelium.episode_urn(p_room, 'live') $$;

-- The envelope's closed sets (contracts/message-envelope.json), checked on every insert by the
-- BEFORE INSERT trigger below rather than by table CHECKs: a table's CHECK expressions are
-- deserialised and planned again for every INSERT statement (six of them cost a seventh of
-- appending one message), a PL/pgSQL body is compiled once per session. The table is append-only
-- (no UPDATE), so the insert is the only moment a row's values can be set.
CREATE OR REPLACE FUNCTION mycelium.message_kind_valid(p_kind text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RETURN p_kind IN ('intent', 'contingency', 'exchange', 'commit', 'knowledge');
END
$$;

CREATE OR REPLACE FUNCTION mycelium.payload_type_valid(p_payload_type text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RETURN p_payload_type IN ('reply', 'message', 'tick', 'utterance', 'consensus', 'distillation', 'ping',
                            'notice', 'presence', 'keepalive');
END
$$;

CREATE OR REPLACE FUNCTION mycelium.sender_role_valid(p_role text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RETURN p_role IN ('agent', 'human', 'coordinator');
END
$$;

-- The subkinds each kind takes.
CREATE OR REPLACE FUNCTION mycelium.message_subkind_valid(p_kind text, p_subkind text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RETURN p_subkind IS NULL OR p_subkind = '' OR (p_kind, p_subkind) IN (
    ('knowledge', 'distillation'), ('knowledge', 'extraction'), ('knowledge', 'feedback'),
    ('knowledge', 'query'), ('commit', 'converged'), ('commit', 'rejected'), ('commit', 'resolved'),
    ('intent', 'coordinator-assignment'), ('intent', 'mission'), ('exchange', 'accept'),
    ('exchange', 'amend'), ('exchange', 'counter'), ('exchange', 'reject'),
    ('exchange', 'team-formation'), ('contingency', 'negotiation'));
END
$$;

CREATE TABLE mycelium.messages (
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  position bigint NOT NULL,
  id uuid NOT NULL DEFAULT gen_random_uuid(),
  episode text NOT NULL,
  kind text NOT NULL DEFAULT 'exchange',  -- message_kind_valid
  subkind text,  -- message_subkind_valid(kind, subkind)
  payload_type text NOT NULL DEFAULT 'message',  -- payload_type_valid
  sender text NOT NULL,  -- not blank
  sender_role text NOT NULL DEFAULT 'agent',  -- sender_role_valid
  recipients text[] NOT NULL DEFAULT '{}',
  parents uuid[] NOT NULL DEFAULT '{}',
  content text NOT NULL DEFAULT '',
  payload jsonb NOT NULL DEFAULT '{}',  -- a JSON object
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, position),
  UNIQUE (id)
);
-- (no index by payload type: no reader asks for one type by equality)
CREATE INDEX messages_by_thread ON mycelium.messages (room, episode, position);

-- Refused like a CHECK constraint would be (SQLSTATE 23514 naming the rule), before a position is
-- taken. A NULL passes here as it would pass a CHECK; NOT NULL refuses it after the trigger.
CREATE OR REPLACE FUNCTION mycelium.messages_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE broken text;
BEGIN
  broken := CASE
    WHEN NOT mycelium.message_kind_valid(NEW.kind) THEN 'messages_kind_check'
    WHEN NOT mycelium.payload_type_valid(NEW.payload_type) THEN 'messages_payload_type_check'
    WHEN NOT mycelium.sender_role_valid(NEW.sender_role) THEN 'messages_sender_role_check'
    WHEN coalesce(NEW.subkind, '') <> '' AND NOT mycelium.message_subkind_valid(NEW.kind, NEW.subkind)
      THEN 'message_subkind_valid'
    WHEN btrim(NEW.sender) = '' THEN 'messages_sender_check'
    WHEN jsonb_typeof(NEW.payload) <> 'object' THEN 'messages_payload_check'
  END;
  IF broken IS NOT NULL THEN
    RAISE EXCEPTION 'new row for relation "messages" violates check constraint "%"', broken
      USING ERRCODE = 'check_violation', SCHEMA = 'mycelium', TABLE = 'messages', CONSTRAINT = broken;
  END IF;
  INSERT INTO mycelium.message_positions AS p (room, last) VALUES (NEW.room, 1)
  ON CONFLICT (room) DO UPDATE SET last = p.last + 1
  RETURNING last INTO NEW.position;
  NEW.created_at := clock_timestamp();
  NEW.episode := coalesce(nullif(NEW.episode, ''), mycelium.live_episode(NEW.room));
  RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER messages_before_insert BEFORE INSERT ON mycelium.messages
  FOR EACH ROW EXECUTE FUNCTION mycelium.messages_before_insert();

-- The wake hint of every insert. Called by assignment (a simple expression), not by PERFORM, which
-- would start a query per row.
CREATE OR REPLACE FUNCTION mycelium.messages_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE hinted text;
BEGIN
  hinted := mycelium.wake_hint('mycelium_messages', NEW.room || ' ' || NEW.position);
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER messages_after_insert AFTER INSERT ON mycelium.messages
  FOR EACH ROW EXECUTE FUNCTION mycelium.messages_after_insert();

CREATE OR REPLACE TRIGGER messages_append_only BEFORE UPDATE OR DELETE ON mycelium.messages
  FOR EACH ROW EXECUTE FUNCTION mycelium.refuse_history_change();
CREATE OR REPLACE TRIGGER messages_no_truncate BEFORE TRUNCATE ON mycelium.messages
  FOR EACH STATEMENT EXECUTE FUNCTION mycelium.refuse_truncate();

-- Post a notice into the room's timeline (the board moved). Called by the verbs in the same
-- transaction as the change, so a notice exists iff its change committed. Notices wake nobody.
-- p_data carries the subkind's own fields (kind, assignee, by, title, episode, speakers, …).
CREATE OR REPLACE FUNCTION mycelium.post_notice(p_room text, p_subkind text, p_key text, p_data jsonb DEFAULT '{}')
RETURNS mycelium.messages LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE r mycelium.messages;
BEGIN
  IF p_subkind NOT IN ('filed', 'claimed', 'released', 'resolved', 'blocked', 'unblocked', 'expired',
                       'floor') THEN
    PERFORM mycelium.refuse(422, 'unknown_notice', format('%L is not a notice subkind', p_subkind));
  END IF;
  INSERT INTO mycelium.messages (room, episode, kind, payload_type, sender, sender_role, payload)
  VALUES (p_room, mycelium.live_episode(p_room), 'exchange', 'notice', 'system', 'coordinator',
          coalesce(p_data, '{}') || jsonb_build_object('subkind', p_subkind, 'key', p_key))
  RETURNING * INTO r;
  RETURN r;
END
$$;

-- ==== sql/board.sql ====
-- The board: tasks are memories in the live namespaces (decisions/ status/ work/ failed/), each
-- bound to its own thread (the memory's database-minted `episode`, write-once and unique per room:
-- see memories.sql). This file holds the board's vocabulary, the row <-> thread lookups, the
-- dependency edges and their cycle check, the notices a row raises when it moves, field writes and
-- the board verbs. Leases (claims) live in assignments.sql.
--
-- Rules the database keeps here, whoever writes (a hub replica, an engine, a person in psql):
--   * filing a board row raises one `filed` notice in the same transaction (trigger on insert);
--   * setting / clearing `blocked_by` raises `blocked` / `unblocked`;
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

-- The lease's own fields: never written as frontmatter, refused by /fields.
CREATE OR REPLACE FUNCTION mycelium.reserved_lease_fields() RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT ARRAY['assignment', 'owner', 'claimed_at', 'ttl_minutes', 'assignment_note', 'assignment_note_by']
$$;

CREATE OR REPLACE FUNCTION mycelium.is_board_key(p_key text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT p_key LIKE '%/%' AND split_part(p_key, '/', 1) = ANY (mycelium.board_namespaces())
$$;

-- (A SQL-standard body: queries that name it inline it, and a stored body is read back instead of
-- being parsed again.)
CREATE OR REPLACE FUNCTION mycelium.is_assignable_key(p_key text) RETURNS boolean LANGUAGE sql IMMUTABLE
RETURN p_key LIKE 'work/_%';

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
-- Handles, titles, slugs.

-- The one handle normalisation (service/mycelium/core/handles.py, contracts/mentions.json): trim
-- ASCII whitespace, drop leading '@', drop a '#session' suffix, trim again, lowercase A-Z only.
CREATE OR REPLACE FUNCTION mycelium.board_handle(p_handle text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT translate(
    btrim(split_part(ltrim(btrim(p_handle, E' \t\n\r\f' || chr(11)), '@'), '#', 1), E' \t\n\r\f' || chr(11)),
    'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')
$$;

CREATE OR REPLACE FUNCTION mycelium.board_handle_problem(p_handle text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE h text := mycelium.board_handle(p_handle);
BEGIN
  RETURN CASE
    WHEN h IS NULL OR h = '' THEN 'blank'
    WHEN length(h) > 64 THEN 'too_long'
    WHEN h !~ '^[a-z0-9]' THEN 'bad_start'
    WHEN h !~ '^[a-z0-9_-]*$' THEN 'bad_character'
  END;
END
$$;

-- A valid normalised handle, or a 422 naming what is wrong with it.
-- (Every verb calls it: a valid handle costs one normalisation and one match; only a bad one is
-- examined further.)
CREATE OR REPLACE FUNCTION mycelium.board_require_handle(p_handle text, p_what text DEFAULT 'handle') RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  h text := mycelium.board_handle(p_handle);
  problem text;
BEGIN
  IF h ~ '^[a-z0-9][a-z0-9_-]{0,63}$' THEN
    RETURN h;
  END IF;
  problem := mycelium.board_handle_problem(p_handle);
  IF problem IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'invalid_handle',
      format('%s %L is not a handle: %s', p_what, coalesce(p_handle, ''), CASE problem
        WHEN 'blank' THEN 'a handle must not be blank'
        WHEN 'too_long' THEN 'a handle has at most 64 characters'
        WHEN 'bad_start' THEN 'a handle must start with a letter a-z or a digit'
        ELSE 'a handle may contain only a-z, 0-9, ''_'' and ''-''' END),
      jsonb_build_object('field', p_what, 'problem', problem));
  END IF;
  RETURN h;
END
$$;

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

CREATE OR REPLACE FUNCTION mycelium.memory_title(p_value jsonb, p_meta jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(nullif(btrim(p_meta ->> 'title'), ''), mycelium.memory_body_title(p_value ->> 'text'))
$$;

-- The key slug of a task title: lowercased, runs of anything but a-z0-9 become '-', trimmed,
-- at most 48 characters, 'task' when nothing is left. Deterministic: the same title lands on the
-- same row.
CREATE OR REPLACE FUNCTION mycelium.task_slug(p_title text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(nullif(btrim(left(btrim(regexp_replace(lower(coalesce(p_title, '')), '[^a-z0-9]+', '-', 'g'),
                                          '-'), 48), '-'), ''), 'task')
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

-- Refuse a depends-on edge that closes a cycle between board rows. Edges are checked one room at
-- a time under a transaction advisory lock, so two writers cannot each add half of a cycle.
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
    WITH RECURSIVE reach (k, path) AS (
      SELECT NEW.target, ARRAY[NEW.source_key, NEW.target]
      UNION ALL
      SELECT d.depends_on, r.path || d.depends_on
      FROM reach r
      JOIN mycelium.board_dependencies d ON d.room = NEW.room AND d.key = r.k
      WHERE mycelium.is_board_key(d.depends_on) AND NOT d.depends_on = ANY (r.path[2:])
    )
    SELECT path INTO loop_path FROM reach WHERE k = NEW.source_key LIMIT 1;
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
CREATE OR REPLACE TRIGGER memory_links_no_dependency_cycle AFTER INSERT ON mycelium.memory_links
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
CREATE OR REPLACE TRIGGER board_rows_filed AFTER INSERT ON mycelium.memories
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

  FOR g IN
    SELECT n.room, array_agg(n.key ORDER BY n.key) AS keys, min(n.updated_by) AS actor
    FROM new_rows n
    JOIN old_rows o ON o.room = n.room AND o.key = n.key
    LEFT JOIN mycelium.assignments a ON a.room = n.room AND a.key = n.key
    WHERE mycelium.is_board_key(n.key)
      AND mycelium.row_settled(n.meta, a.state) AND NOT mycelium.row_settled(o.meta, a.state)
    GROUP BY n.room
  LOOP
    PERFORM mycelium.raise_unblocked(g.room, g.keys, g.actor);
  END LOOP;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER board_rows_moved AFTER UPDATE ON mycelium.memories
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
CREATE OR REPLACE TRIGGER board_rows_no_lease_fields BEFORE INSERT OR UPDATE OF meta ON mycelium.memories
  FOR EACH ROW WHEN (mycelium.is_board_key(NEW.key))
  EXECUTE FUNCTION mycelium.board_rows_no_lease_fields();

-- ---------------------------------------------------------------------------------------------
-- The dependency gate setting: mycelium.config 'board.dependency_gate' (per room, else hub-wide),
-- off by default.

CREATE OR REPLACE FUNCTION mycelium.dependency_gate_on(p_room text) RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT coalesce(mycelium.config_value('board.dependency_gate', p_room) = 'true'::jsonb, false)
$$;

CREATE OR REPLACE FUNCTION mycelium.set_dependency_gate(p_on boolean, p_room text DEFAULT '', p_by text DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  IF coalesce(p_room, '') <> '' THEN
    PERFORM mycelium.require_room(p_room);
  END IF;
  PERFORM mycelium.set_config('board.dependency_gate', to_jsonb(p_on), coalesce(p_room, ''), p_by);
  RETURN mycelium.dependency_gate_on(nullif(p_room, ''));
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Field writes: frontmatter of one existing memory; a JSON null clears a field; prose, tags and
-- the vector are untouched; version +1. Lease fields are refused (all of the write, 422).

CREATE OR REPLACE FUNCTION mycelium.write_fields(p_room text, p_key text, p_by text, p_fields jsonb)
RETURNS mycelium.memories LANGUAGE plpgsql AS $$
DECLARE
  cur mycelium.memories;
  bad text[];
  f record;
  allowed text[];
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF p_by IS NULL OR btrim(p_by) = '' THEN
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
  RETURN mycelium.write_memory(p_room, p_key, cur.value, p_by, NULL, p_fields, cur.content_text,
                               NULL, NULL, false);
END
$$;

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
  RETURN mycelium.write_fields(p_room, p_key, mycelium.board_require_handle(p_by),
                               jsonb_build_object('blocked_by', btrim(p_on)));
END
$$;

CREATE OR REPLACE FUNCTION mycelium.unblock_row(p_room text, p_key text, p_by text)
RETURNS mycelium.memories LANGUAGE plpgsql AS $$
DECLARE m mycelium.memories := mycelium.require_board_row(p_room, p_key);
BEGIN
  IF NOT m.meta ? 'blocked_by' THEN
    PERFORM mycelium.refuse(409, 'not_blocked', format('%L is not blocked', p_key),
                            jsonb_build_object('key', p_key));
  END IF;
  RETURN mycelium.write_fields(p_room, p_key, mycelium.board_require_handle(p_by), '{"blocked_by": null}');
END
$$;

CREATE OR REPLACE FUNCTION mycelium.dismiss_row(p_room text, p_key text, p_by text)
RETURNS mycelium.memories LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.require_board_row(p_room, p_key);
  RETURN mycelium.write_fields(p_room, p_key, mycelium.board_require_handle(p_by), '{"status": "dismissed"}');
END
$$;

-- Promote: the row is owned elsewhere now (an issue, a PR); it is resolved here and says where.
CREATE OR REPLACE FUNCTION mycelium.promote_row(p_room text, p_key text, p_by text, p_url text DEFAULT NULL)
RETURNS mycelium.memories LANGUAGE plpgsql AS $$
DECLARE h text := mycelium.board_require_handle(p_by);
BEGIN
  PERFORM mycelium.require_board_row(p_room, p_key);
  RETURN mycelium.write_fields(p_room, p_key, h,
    jsonb_build_object('status', 'resolved', 'promoted_by', h)
    || CASE WHEN nullif(btrim(p_url), '') IS NOT NULL THEN jsonb_build_object('upstream_url', btrim(p_url))
            ELSE '{}' END);
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Tasks: file a row in work/ (status open, kind action), optionally for someone and under a parent.

CREATE OR REPLACE FUNCTION mycelium.create_task(p_room text, p_title text, p_by text, p_key text DEFAULT NULL,
                                     p_assignee text DEFAULT NULL, p_parent text DEFAULT NULL)
RETURNS mycelium.memories LANGUAGE plpgsql AS $$
DECLARE
  by_handle text;
  k text;
  meta jsonb := jsonb_build_object('status', 'open', 'kind', 'action');
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF p_title IS NULL OR btrim(p_title) = '' THEN
    PERFORM mycelium.refuse(422, 'missing_title', 'a task needs a title');
  END IF;
  by_handle := mycelium.board_require_handle(p_by);
  k := coalesce(nullif(btrim(p_key), ''), 'work/' || mycelium.task_slug(p_title));
  IF NOT mycelium.is_board_key(k) THEN
    PERFORM mycelium.refuse(422, 'not_a_board_row',
      format('%L is not a board row: a task lives in work/ (or decisions/ status/ failed/)', k),
      jsonb_build_object('key', k));
  END IF;
  IF nullif(btrim(p_assignee), '') IS NOT NULL THEN
    meta := meta || jsonb_build_object('assignee', mycelium.board_require_handle(p_assignee, 'assignee'));
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
  RETURN mycelium.write_memory(p_room, k, jsonb_build_object('text', '# ' || btrim(p_title) || E'\n'),
                               by_handle, NULL, meta);
END
$$;

-- ==== sql/assignments.sql ====
-- Assignments: leases on work/ rows.
--
-- Shape: one row per leased work/ row in mycelium.assignments (room, key), referencing the memory.
-- The table stores only what was written: state (held | released | resolved), owner, claimed_at,
-- ttl_minutes, the release/resolve note, and claim_id (a fresh number per claim, from a sequence).
-- Whether a lease is still live (held, expired), its freshness and what the row waits on are
-- derived from the database clock in the view mycelium.lease_states, never written. A work/ row
-- without a row here is unclaimed. The lease is not copied into the row's frontmatter (the
-- frontmatter of a board row refuses the lease fields, see board.sql): lease changes therefore do
-- not bump the memory's version; they are recorded by their notices in the timeline.
--
-- Rules kept by triggers, so a person in psql meets them too:
--   * only work/ rows are leased (422);
--   * a live lease is never taken over by someone else: a claim by another handle, or a direct
--     UPDATE of the owner, is refused (409 naming the holder); the same holder may re-claim;
--   * an expired lease is never brought back by renewing it (409): it has to be claimed again;
--   * a live lease is not deleted directly (409): release it;
--   * every claim, release and resolve raises its notice in the same transaction; the crossing of
--     an expired lease is announced once (lease_expiries is keyed by claim_id), by the sweeper or
--     by whichever write ends that lease first.

CREATE SEQUENCE mycelium.claim_ids;

-- The per-column rules are domains: a domain's check is compiled once per session (type cache),
-- while a table CHECK is read back and compiled again by every statement that writes the table.
CREATE DOMAIN mycelium.work_key AS text
  CONSTRAINT assignment_on_work_row CHECK (mycelium.is_assignable_key(VALUE));
CREATE DOMAIN mycelium.lease_state AS text
  CONSTRAINT assignments_state_check CHECK (VALUE IN ('held', 'released', 'resolved'));
CREATE DOMAIN mycelium.lease_owner AS text CHECK (VALUE ~ '^[a-z0-9][a-z0-9_-]{0,63}$');
CREATE DOMAIN mycelium.lease_minutes AS integer CHECK (VALUE >= 1);

CREATE TABLE mycelium.assignments (
  room text NOT NULL,
  key mycelium.work_key NOT NULL,
  state mycelium.lease_state NOT NULL,
  owner mycelium.lease_owner,
  claimed_at timestamptz,
  ttl_minutes mycelium.lease_minutes,
  note text,
  note_by text,
  claim_id bigint,
  version integer NOT NULL DEFAULT 1,
  updated_by text NOT NULL DEFAULT mycelium.actor(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, key),
  FOREIGN KEY (room, key) REFERENCES mycelium.memories (room, key) ON DELETE CASCADE
);
-- (A held lease is complete: owner, claimed_at, ttl_minutes and claim_id. Kept by
-- assignments_before_write rather than a table CHECK, which every write would read back and compile.)
CREATE INDEX assignments_held_by ON mycelium.assignments (owner) WHERE state = 'held';
CREATE INDEX assignments_held ON mycelium.assignments (room, claimed_at) WHERE state = 'held';

-- One row per announced expiry: the sweeper and the writers insert here before raising `expired`,
-- so each lease crossing is announced exactly once, across replicas and restarts.
CREATE TABLE mycelium.lease_expiries (
  claim_id bigint PRIMARY KEY,
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  key text NOT NULL,
  owner text NOT NULL,
  expired_at timestamptz NOT NULL,
  announced_at timestamptz NOT NULL DEFAULT now(),
  announced_by text NOT NULL
);

-- (STABLE, as timestamptz + interval is: a SQL function declared IMMUTABLE over a STABLE operator is
-- never inlined, so every lease read and guard ran it as a function call of its own.)
CREATE OR REPLACE FUNCTION mycelium.task_lease_end(p_claimed_at timestamptz, p_ttl_minutes integer) RETURNS timestamptz
LANGUAGE sql STABLE RETURN p_claimed_at + make_interval(mins => p_ttl_minutes);

-- A held lease is live until claimed_at + ttl (by the database clock).
CREATE OR REPLACE FUNCTION mycelium.task_lease_live(a mycelium.assignments) RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT a.state = 'held' AND a.owner IS NOT NULL AND now() < mycelium.task_lease_end(a.claimed_at, a.ttl_minutes)
$$;

-- ---------------------------------------------------------------------------------------------
-- Derived state.

-- The dependencies a row waits on: existing, unsettled board rows it `depends-on`, in the order
-- they are written.
CREATE OR REPLACE FUNCTION mycelium.waiting_on(p_room text, p_key text) RETURNS text[] LANGUAGE sql STABLE AS $$
  SELECT coalesce(array_agg(d.depends_on ORDER BY d.ord, d.depends_on), '{}')
  FROM mycelium.board_dependencies d
  JOIN mycelium.memories m ON m.room = d.room AND m.key = d.depends_on
  LEFT JOIN mycelium.assignments a ON a.room = m.room AND a.key = m.key
  WHERE d.room = p_room AND d.key = p_key AND mycelium.is_board_key(d.depends_on)
    AND NOT mycelium.row_settled(m.meta, a.state)
$$;

-- The derived state of a lease row (NULL when never leased): unclaimed, held, expired, released or
-- resolved.
CREATE OR REPLACE FUNCTION mycelium.lease_assignment(a mycelium.assignments) RETURNS text LANGUAGE sql STABLE AS $$
  SELECT CASE
    WHEN a.state IS NULL THEN 'unclaimed'
    WHEN a.state <> 'held' THEN a.state
    WHEN a.owner IS NULL THEN 'unclaimed'
    WHEN now() < mycelium.task_lease_end(a.claimed_at, a.ttl_minutes) THEN 'held'
    ELSE 'expired' END
$$;

-- A work/ row's lease as readers see it. `assignment` is the derived state: unclaimed, held,
-- expired, released or resolved; `freshness` is fresh (< half the ttl spent), stale (< all) or
-- expired; an expired lease's note says so (nothing is written). Built from the memory and its
-- lease row (NULL when never leased), so the verbs can answer from the rows they just wrote.
CREATE TYPE mycelium.lease_read AS (
  room text, key text, episode text, version integer, title text, assignment text, stored_state text,
  owner text, claimed_at timestamptz, ttl_minutes integer, expires_at timestamptz, freshness text,
  assignment_note text, assignment_note_by text, waiting_on text[], claim_id bigint, lease_version integer
);

-- (One ROW expression: the planner inlines it into the caller, so a read is built without a
-- function call of its own.)
CREATE OR REPLACE FUNCTION mycelium.lease_read(m mycelium.memories, a mycelium.assignments)
RETURNS mycelium.lease_read LANGUAGE sql STABLE AS $$
  SELECT ROW(
    m.room, m.key, m.episode, m.version, mycelium.memory_title(m.value, m.meta),
    mycelium.lease_assignment(a), a.state, a.owner, a.claimed_at, a.ttl_minutes,
    mycelium.task_lease_end(a.claimed_at, a.ttl_minutes),
    CASE WHEN a.claimed_at IS NULL OR a.ttl_minutes IS NULL THEN NULL
         WHEN now() >= mycelium.task_lease_end(a.claimed_at, a.ttl_minutes) THEN 'expired'
         WHEN (now() - a.claimed_at) * 2 < make_interval(mins => a.ttl_minutes) THEN 'fresh'
         ELSE 'stale' END,
    CASE WHEN mycelium.lease_assignment(a) = 'expired' THEN format('expired — @%s stopped renewing', a.owner)
         ELSE a.note END,
    CASE WHEN mycelium.lease_assignment(a) = 'expired' THEN 'runtime' ELSE a.note_by END,
    mycelium.waiting_on(m.room, m.key), a.claim_id, coalesce(a.version, 0))::mycelium.lease_read
$$;

-- The answer of a verb that has just written lease a: lease_read without the clock, which that
-- write fixed. A claim has just started (claimed_at = now(): held, fresh, no note); a release or a
-- resolve does not run out (its own state, its note). A smaller expression than lease_read's, which
-- a verb compiles again in every transaction. p_waiting_on is what the row waits on, read by the verb
-- before its write (a lease never changes what its own row waits on): the verbs append their notice,
-- which takes the room's timeline lock, as late as they can, so nothing slow runs between it and the
-- commit. (tests/board: each verb's answer equals a read of the lease in the same transaction.)
CREATE OR REPLACE FUNCTION mycelium.lease_written(m mycelium.memories, a mycelium.assignments, p_waiting_on text[])
RETURNS mycelium.lease_read LANGUAGE sql STABLE AS $$
  SELECT ROW(
    m.room, m.key, m.episode, m.version, mycelium.memory_title(m.value, m.meta), a.state, a.state, a.owner,
    a.claimed_at, a.ttl_minutes, mycelium.task_lease_end(a.claimed_at, a.ttl_minutes),
    CASE WHEN a.state = 'held' THEN 'fresh' END, a.note, a.note_by, p_waiting_on, a.claim_id,
    a.version)::mycelium.lease_read
$$;

-- Every work/ row's lease.
CREATE OR REPLACE VIEW mycelium.lease_states AS
  SELECT l.*
  FROM mycelium.memories m
  LEFT JOIN mycelium.assignments a ON a.room = m.room AND a.key = m.key
  CROSS JOIN LATERAL mycelium.lease_read(m, a) l
  WHERE mycelium.is_assignable_key(m.key);

-- Every board row with what a board shows: status, kind, priority, lease, what it waits on, and
-- where it needs attention (resolved > in_flight > needs_you).
CREATE OR REPLACE VIEW mycelium.board_rows AS
  SELECT m.room, m.key, split_part(m.key, '/', 1) AS namespace,
         mycelium.memory_title(m.value, m.meta) AS title,
         m.meta ->> 'status' AS status, m.meta ->> 'kind' AS kind, m.meta ->> 'priority' AS priority,
         m.meta ->> 'assignee' AS assignee, m.meta ->> 'blocked_by' AS blocked_by,
         m.meta ->> 'part-of' AS parent,
         m.episode, mycelium.episode_short_id(m.episode) AS short_id,
         m.version, m.created_by, m.updated_by, m.created_at, m.updated_at,
         l.assignment, l.owner, l.claimed_at, l.ttl_minutes, l.expires_at, l.freshness,
         coalesce(l.waiting_on, mycelium.waiting_on(m.room, m.key)) AS waiting_on,
         CASE WHEN mycelium.row_settled(m.meta, l.stored_state) THEN 'resolved'
              WHEN m.meta ->> 'status' = 'in_review' OR l.assignment = 'held' THEN 'in_flight'
              ELSE 'needs_you' END AS attention
  FROM mycelium.memories m
  LEFT JOIN mycelium.lease_states l ON l.room = m.room AND l.key = m.key
  WHERE mycelium.is_board_key(m.key);

-- ---------------------------------------------------------------------------------------------
-- Guards and notices.

CREATE OR REPLACE FUNCTION mycelium.assignments_before_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  old_live boolean := TG_OP = 'UPDATE' AND mycelium.task_lease_live(OLD);
BEGIN
  IF NEW.claimed_at > now() + interval '1 second' THEN
    PERFORM mycelium.refuse(422, 'claimed_in_future', 'a lease cannot be claimed in the future',
                            jsonb_build_object('key', NEW.key, 'claimed_at', NEW.claimed_at));
  END IF;
  IF TG_OP = 'UPDATE' THEN
    IF (NEW.room, NEW.key) IS DISTINCT FROM (OLD.room, OLD.key) THEN
      PERFORM mycelium.refuse(409, 'immutable', 'a lease stays on its row: room and key never change',
                              jsonb_build_object('key', OLD.key));
    END IF;
    IF old_live AND NEW.state = 'held' AND NEW.owner IS DISTINCT FROM OLD.owner THEN
      PERFORM mycelium.refuse(409, 'lease_held', format('%L is held by @%s', OLD.key, OLD.owner),
        jsonb_build_object('key', OLD.key, 'owner', OLD.owner, 'claimed_at', OLD.claimed_at,
                           'ttl_minutes', OLD.ttl_minutes));
    END IF;
    IF NOT old_live AND OLD.state = 'held' AND NEW.state = 'held' AND NEW.owner = OLD.owner
       AND NEW.claim_id IS NOT DISTINCT FROM OLD.claim_id
       AND (NEW.claimed_at, NEW.ttl_minutes) IS DISTINCT FROM (OLD.claimed_at, OLD.ttl_minutes) THEN
      PERFORM mycelium.refuse(409, 'lease_expired',
        format('the lease of @%s on %L has expired: claim it again instead of renewing it', OLD.owner, OLD.key),
        jsonb_build_object('key', OLD.key, 'owner', OLD.owner));
    END IF;
    NEW.version := OLD.version + 1;
    -- someone takes the row: that is a new lease, with its own number
    IF NEW.state = 'held' AND NEW.claim_id IS NOT DISTINCT FROM OLD.claim_id
       AND (OLD.state <> 'held' OR NEW.owner IS DISTINCT FROM OLD.owner) THEN
      NEW.claim_id := nextval('mycelium.claim_ids');
    END IF;
  ELSE
    NEW.version := 1;
    IF NEW.state = 'held' AND NEW.claim_id IS NULL THEN
      NEW.claim_id := nextval('mycelium.claim_ids');
    END IF;
  END IF;
  IF NEW.state = 'held' AND (NEW.owner IS NULL OR NEW.claimed_at IS NULL OR NEW.ttl_minutes IS NULL
                             OR NEW.claim_id IS NULL) THEN
    PERFORM mycelium.refuse(422, 'incomplete_lease', 'a held lease names its owner, claimed_at, ttl_minutes and claim_id',
                            jsonb_build_object('key', NEW.key));
  END IF;
  NEW.updated_by := mycelium.actor();
  NEW.updated_at := now();
  RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER assignments_before_write BEFORE INSERT OR UPDATE ON mycelium.assignments
  FOR EACH ROW EXECUTE FUNCTION mycelium.assignments_before_write();

-- Announce the expiry of lease p (a held lease whose time is up) unless it was announced already.
CREATE OR REPLACE FUNCTION mycelium.announce_expiry(p mycelium.assignments, p_by text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE m mycelium.memories;
BEGIN
  INSERT INTO mycelium.lease_expiries (claim_id, room, key, owner, expired_at, announced_by)
  VALUES (p.claim_id, p.room, p.key, p.owner, mycelium.task_lease_end(p.claimed_at, p.ttl_minutes), p_by)
  ON CONFLICT (claim_id) DO NOTHING;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  SELECT * INTO m FROM mycelium.memories WHERE room = p.room AND key = p.key;
  PERFORM mycelium.row_notice(p.room, 'expired', p.key, m.value, m.meta, m.episode,
    jsonb_build_object('by', p.owner, 'claimed_at', p.claimed_at, 'ttl_minutes', p.ttl_minutes));
  RETURN true;
END
$$;

-- (Only a write that raises a notice reads the row, once: its title and thread for the notice and,
-- for a resolve, whether anything depends on it; the notice is posted directly. This runs on every
-- lease write.)
--
-- A resolve settles the row: its dependents that now wait on nothing hear `unblocked`, once per
-- statement however many of their prerequisites the statement settled. A resolve that something
-- depends on is noted (room, key, who) in a transaction-local setting; the statement trigger below
-- raises the notices for everything noted and clears it, and returns at once when nothing was (a
-- claim, release or renew, a row nothing waits on), so no other write pays for transition tables or
-- a query. A row settled by its status already unblocked its dependents then. Before it is noted,
-- such a row is locked FOR NO KEY UPDATE and its status read again, so a field write settling it at
-- the same time (a plain UPDATE of the lease too) is either seen or waits for this commit.
CREATE OR REPLACE FUNCTION mycelium.assignments_after_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  title text;
  thread text;
  waited_on boolean;
  subkind text;
  extra jsonb;
  noted text;
  by_handle text := mycelium.actor();
  kept text;
BEGIN
  kept := mycelium.wake_hint('mycelium_board', NEW.room);  -- by assignment: a PERFORM starts a query
  IF TG_OP = 'UPDATE' AND OLD.state = 'held' AND NOT mycelium.task_lease_live(OLD)
     AND (NEW.claim_id IS DISTINCT FROM OLD.claim_id OR NEW.state <> 'held') THEN
    PERFORM mycelium.announce_expiry(OLD, by_handle);
  END IF;
  IF NEW.state = 'held' AND (TG_OP = 'INSERT' OR NEW.claim_id IS DISTINCT FROM OLD.claim_id) THEN
    subkind := 'claimed';
    extra := jsonb_build_object('by', NEW.owner, 'ttl_minutes', NEW.ttl_minutes);
  ELSIF NEW.state <> 'held' AND (TG_OP = 'INSERT' OR NEW.state <> OLD.state) THEN
    subkind := NEW.state;
    extra := jsonb_build_object('by', coalesce(NEW.note_by, by_handle), 'note', NEW.note);
  ELSE
    RETURN NULL;
  END IF;
  SELECT mycelium.memory_title(m.value, m.meta), m.episode,
         CASE WHEN NEW.state = 'resolved' THEN NOT mycelium.row_settled(m.meta, NULL) AND EXISTS (
           SELECT 1 FROM mycelium.memory_links l
           WHERE l.room = m.room AND l.target = m.key AND l.kind = 'relation' AND l.relation = 'depends-on'
             AND l.cross_room IS NULL) END
  INTO title, thread, waited_on
  FROM mycelium.memories m WHERE m.room = NEW.room AND m.key = NEW.key;
  IF waited_on THEN
    -- read its status again under the row lock (taken already when resolve_task saw the dependents)
    SELECT NOT mycelium.row_settled(m.meta, NULL) INTO waited_on
    FROM mycelium.memories m WHERE m.room = NEW.room AND m.key = NEW.key
    FOR NO KEY UPDATE;
  END IF;
  PERFORM mycelium.post_notice(NEW.room, subkind, NEW.key,
                               jsonb_build_object('title', title, 'episode', thread) || extra);
  IF coalesce(waited_on, false) THEN
    noted := nullif(current_setting('mycelium.settled_leases', true), '');
    noted := set_config('mycelium.settled_leases',
      (coalesce(noted::jsonb, '[]') || jsonb_build_array(jsonb_build_array(
        NEW.room, NEW.key, coalesce(NEW.note_by, NEW.updated_by))))::text, true);
  END IF;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER assignments_after_write AFTER INSERT OR UPDATE ON mycelium.assignments
  FOR EACH ROW EXECUTE FUNCTION mycelium.assignments_after_write();

CREATE OR REPLACE FUNCTION mycelium.assignments_raise_unblocked() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  noted text := nullif(current_setting('mycelium.settled_leases', true), '');
  g record;
BEGIN
  IF noted IS NULL THEN
    RETURN NULL;
  END IF;
  PERFORM set_config('mycelium.settled_leases', '', true);
  FOR g IN
    SELECT s ->> 0 AS room, array_agg(DISTINCT s ->> 1 ORDER BY s ->> 1) AS keys, min(s ->> 2) AS actor
    FROM jsonb_array_elements(noted::jsonb) s
    GROUP BY 1
  LOOP
    PERFORM mycelium.raise_unblocked(g.room, g.keys, g.actor);
  END LOOP;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER assignments_settled AFTER INSERT OR UPDATE ON mycelium.assignments
  FOR EACH STATEMENT EXECUTE FUNCTION mycelium.assignments_raise_unblocked();

CREATE OR REPLACE FUNCTION mycelium.assignments_before_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF mycelium.task_lease_live(OLD) AND EXISTS (SELECT 1 FROM mycelium.memories WHERE room = OLD.room AND key = OLD.key) THEN
    PERFORM mycelium.refuse(409, 'lease_held',
      format('%L is held by @%s: release it rather than deleting the lease', OLD.key, OLD.owner),
      jsonb_build_object('key', OLD.key, 'owner', OLD.owner));
  END IF;
  RETURN OLD;
END
$$;
CREATE OR REPLACE TRIGGER assignments_before_delete BEFORE DELETE ON mycelium.assignments
  FOR EACH ROW EXECUTE FUNCTION mycelium.assignments_before_delete();

-- ---------------------------------------------------------------------------------------------
-- Verbs.

-- Why a lease verb found no row to work on: 422 outside work/, else 404 (no such room or memory).
-- Called only once the verb's one read came back empty, so a verb that finds its row pays nothing.
CREATE OR REPLACE FUNCTION mycelium.refuse_task_lease(p_room text, p_key text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF NOT mycelium.is_assignable_key(coalesce(p_key, '')) THEN
    PERFORM mycelium.refuse(422, 'not_assignable',
      format('leases live on work/ memories; %L is elsewhere', p_key), jsonb_build_object('key', p_key));
  END IF;
  PERFORM mycelium.refuse(404, 'memory_not_found', format('no memory %L in this room', p_key),
                          jsonb_build_object('room', p_room, 'key', p_key));
END
$$;

-- The lease of one work/ row, or the refusal upstream gives: 422 outside work/, 404 if missing.
CREATE OR REPLACE FUNCTION mycelium.read_assignment(p_room text, p_key text) RETURNS mycelium.lease_read
LANGUAGE plpgsql STABLE AS $$
DECLARE
  m mycelium.memories;
  a mycelium.assignments;
BEGIN
  SELECT * INTO m FROM mycelium.memories WHERE room = p_room AND key = p_key AND mycelium.is_assignable_key(key);
  IF NOT FOUND THEN
    PERFORM mycelium.refuse_task_lease(p_room, p_key);
  END IF;
  SELECT * INTO a FROM mycelium.assignments WHERE room = p_room AND key = p_key;
  RETURN mycelium.lease_read(m, a);
END
$$;

-- The verbs below each read their row once, through task_row_of (only the columns a lease read and
-- a notice name, so a stored vector is never fetched; whether the row depends on anything, so a row
-- without an edge skips the dependency query; for resolve, whether anything depends on it, so only
-- then is it locked), decide, and make one write to mycelium.assignments, whose triggers keep the
-- rules and append the notice; what the row waits on is read before that write, so after the notice
-- (which holds the room's timeline counter until the commit) only the answer is built.
-- task_row_of is a SQL function over one SELECT, so each verb's query inlines it: no call at run
-- time, and a column a verb does not name is not computed. It finds no row outside work/.
CREATE OR REPLACE FUNCTION mycelium.task_row_of(p_room text, p_key text)
RETURNS TABLE (episode text, version integer, value jsonb, meta jsonb, depends boolean, depended boolean)
LANGUAGE sql STABLE AS $$
  SELECT x.episode, x.version, x.value, x.meta,
         EXISTS (SELECT 1 FROM mycelium.memory_links l WHERE l.room = x.room AND l.source_key = x.key
                   AND l.kind = 'relation' AND l.relation = 'depends-on'),
         EXISTS (SELECT 1 FROM mycelium.memory_links l WHERE l.room = x.room AND l.target = x.key
                   AND l.kind = 'relation' AND l.relation = 'depends-on' AND l.cross_room IS NULL)
  FROM mycelium.memories x WHERE x.room = p_room AND x.key = p_key AND mycelium.is_assignable_key(x.key)
$$;

-- Claim: take the lease for p_ttl_minutes. Someone else's live lease -> 409 naming the holder;
-- the same holder refreshes; an expired lease is taken over. With the dependency gate on (and no
-- p_force) a row that still waits on something -> 409 with waiting_on.
-- One upsert: a first claim inserts the lease; a later one updates it, and the row lock that the
-- conflict takes makes concurrent claimants queue; the takeover of someone else's live lease is
-- refused by assignments_before_write, the same rule a direct UPDATE meets.
CREATE OR REPLACE FUNCTION mycelium.claim_task(p_room text, p_key text, p_handle text, p_ttl_minutes integer DEFAULT 30,
                                    p_force boolean DEFAULT false)
RETURNS mycelium.lease_read LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  h text := mycelium.board_require_handle(p_handle);
  m mycelium.memories;
  a mycelium.assignments;
  depends boolean;
  waits text[];
BEGIN
  IF p_ttl_minutes IS NULL OR p_ttl_minutes < 1 THEN
    PERFORM mycelium.refuse(422, 'invalid_ttl', 'ttl_minutes is a whole number of minutes, 1 or more',
                            jsonb_build_object('key', p_key));
  END IF;
  SELECT r.episode, r.version, r.value, r.meta, r.depends
  INTO m.episode, m.version, m.value, m.meta, depends
  FROM mycelium.task_row_of(p_room, p_key) r;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse_task_lease(p_room, p_key);
  END IF;
  m.room := p_room;
  m.key := p_key;
  waits := CASE WHEN depends THEN mycelium.waiting_on(p_room, p_key) ELSE '{}' END;
  IF cardinality(waits) > 0 AND NOT coalesce(p_force, false) AND mycelium.dependency_gate_on(p_room) THEN
    SELECT * INTO a FROM mycelium.assignments x WHERE x.room = p_room AND x.key = p_key;
    IF mycelium.task_lease_live(a) AND a.owner <> h THEN  -- the holder is named first
      PERFORM mycelium.refuse(409, 'lease_held', format('%L is held by @%s', p_key, a.owner),
        jsonb_build_object('key', p_key, 'owner', a.owner, 'claimed_at', a.claimed_at,
                           'ttl_minutes', a.ttl_minutes));
    END IF;
    PERFORM mycelium.refuse(409, 'waiting', format('%L waits on %s', p_key, array_to_string(waits, ', ')),
                            jsonb_build_object('key', p_key, 'waiting_on', to_jsonb(waits)));
  END IF;
  h := set_config('mycelium.actor', h, true);
  INSERT INTO mycelium.assignments AS x (room, key, state, owner, claimed_at, ttl_minutes, claim_id)
  VALUES (p_room, p_key, 'held', h, now(), p_ttl_minutes, nextval('mycelium.claim_ids'))
  ON CONFLICT (room, key) DO UPDATE
  SET state = 'held', owner = h, claimed_at = now(), ttl_minutes = p_ttl_minutes, note = NULL, note_by = NULL,
      claim_id = excluded.claim_id
  RETURNING * INTO a;
  RETURN mycelium.lease_written(m, a, waits);
END
$$;

-- Release: the row is free again, with a note (default 'released') and who left it.
CREATE OR REPLACE FUNCTION mycelium.release_task(p_room text, p_key text, p_handle text, p_note text DEFAULT NULL)
RETURNS mycelium.lease_read LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  h text := mycelium.board_require_handle(p_handle);
  m mycelium.memories;
  a mycelium.assignments;
  depends boolean;
  waits text[];
  v_note text := coalesce(nullif(btrim(p_note), ''), 'released');
BEGIN
  SELECT r.episode, r.version, r.value, r.meta, r.depends
  INTO m.episode, m.version, m.value, m.meta, depends
  FROM mycelium.task_row_of(p_room, p_key) r;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse_task_lease(p_room, p_key);
  END IF;
  m.room := p_room;
  m.key := p_key;
  waits := CASE WHEN depends THEN mycelium.waiting_on(p_room, p_key) ELSE '{}' END;
  h := set_config('mycelium.actor', h, true);
  INSERT INTO mycelium.assignments AS x (room, key, state, note, note_by)
  VALUES (p_room, p_key, 'released', v_note, h)
  ON CONFLICT (room, key) DO UPDATE
  SET state = 'released', owner = NULL, claimed_at = NULL, ttl_minutes = NULL, note = v_note, note_by = h
  RETURNING * INTO a;
  RETURN mycelium.lease_written(m, a, waits);
END
$$;

-- Resolve: the work is done. Dependents that now wait on nothing get their `unblocked` notice in
-- this same transaction (trigger). A row something depends on is locked FOR NO KEY UPDATE before its
-- lease (and read again under the lock): a field write that settles it at the same time either
-- committed first (this resolve then sees it settled and raises nothing) or waits for this commit and
-- then sees the lease resolved, so the dependents hear `unblocked` once. A row nothing depends on
-- has nobody to unblock and is not locked (assignments_after_write locks it itself if a dependent
-- appeared in between).
CREATE OR REPLACE FUNCTION mycelium.resolve_task(p_room text, p_key text, p_handle text)
RETURNS mycelium.lease_read LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  h text := mycelium.board_require_handle(p_handle);
  m mycelium.memories;
  a mycelium.assignments;
  depends boolean;
  depended boolean;
  waits text[];
BEGIN
  SELECT r.episode, r.version, r.value, r.meta, r.depends, r.depended
  INTO m.episode, m.version, m.value, m.meta, depends, depended
  FROM mycelium.task_row_of(p_room, p_key) r;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse_task_lease(p_room, p_key);
  END IF;
  IF depended THEN
    SELECT x.version, x.value, x.meta INTO m.version, m.value, m.meta
    FROM mycelium.memories x WHERE x.room = p_room AND x.key = p_key
    FOR NO KEY UPDATE;
    IF NOT FOUND THEN  -- deleted since the first read
      PERFORM mycelium.refuse_task_lease(p_room, p_key);
    END IF;
  END IF;
  m.room := p_room;
  m.key := p_key;
  waits := CASE WHEN depends THEN mycelium.waiting_on(p_room, p_key) ELSE '{}' END;
  h := set_config('mycelium.actor', h, true);
  LOOP
    UPDATE mycelium.assignments x
    SET state = 'resolved', claimed_at = NULL, ttl_minutes = NULL, note = format('resolved by @%s', h), note_by = h
    WHERE x.room = p_room AND x.key = p_key
    RETURNING * INTO a;
    EXIT WHEN FOUND;
    -- never leased; a claim that inserts its lease meanwhile is resolved by the next round
    INSERT INTO mycelium.assignments (room, key, state, note, note_by)
    VALUES (p_room, p_key, 'resolved', format('resolved by @%s', h), h)
    ON CONFLICT (room, key) DO NOTHING
    RETURNING * INTO a;
    EXIT WHEN FOUND;
  END LOOP;
  RETURN mycelium.lease_written(m, a, waits);
END
$$;

-- Renew: refresh every lease p_handle holds in the room that is past half its time and still
-- live. Fresh leases are left alone (no write); expired ones are not brought back. No notices.
CREATE OR REPLACE FUNCTION mycelium.renew_tasks(p_room text, p_handle text)
RETURNS TABLE (key text, claimed_at timestamptz, ttl_minutes integer) LANGUAGE plpgsql AS $$
DECLARE h text := mycelium.board_require_handle(p_handle);
BEGIN
  PERFORM mycelium.require_room(p_room);
  PERFORM set_config('mycelium.actor', h, true);
  RETURN QUERY
  UPDATE mycelium.assignments a SET claimed_at = now()
  WHERE a.room = p_room AND a.owner = h AND a.state = 'held'
    AND now() < mycelium.task_lease_end(a.claimed_at, a.ttl_minutes)
    AND (now() - a.claimed_at) * 2 >= make_interval(mins => a.ttl_minutes)
  RETURNING a.key::text, a.claimed_at, a.ttl_minutes::integer;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- The sweeper: announce each lease that has run out, once. One sweeper at a time across replicas
-- (transaction advisory lock: the others return nothing); each announcement is recorded with the
-- notice in one transaction, so a restart neither repeats nor loses one.

CREATE OR REPLACE FUNCTION mycelium.sweep_expired_leases(p_limit integer DEFAULT 500)
RETURNS TABLE (room text, key text, owner text, claim_id bigint, expired_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE a mycelium.assignments;
BEGIN
  IF NOT pg_try_advisory_xact_lock(hashtextextended('mycelium.lease-sweep', 0)) THEN
    RETURN;
  END IF;
  FOR a IN
    SELECT s.* FROM mycelium.assignments s
    WHERE s.state = 'held' AND now() >= mycelium.task_lease_end(s.claimed_at, s.ttl_minutes)
      AND NOT EXISTS (SELECT 1 FROM mycelium.lease_expiries e WHERE e.claim_id = s.claim_id)
    ORDER BY s.claimed_at
    LIMIT p_limit
    FOR UPDATE OF s SKIP LOCKED
  LOOP
    IF mycelium.announce_expiry(a, 'runtime') THEN
      room := a.room; key := a.key; owner := a.owner; claim_id := a.claim_id;
      expired_at := mycelium.task_lease_end(a.claimed_at, a.ttl_minutes);
      RETURN NEXT;
    END IF;
  END LOOP;
END
$$;

-- Seconds until the next held lease runs out (NULL when none is held), so a sweeper sleeps
-- exactly as long as it may.
CREATE OR REPLACE FUNCTION mycelium.next_lease_expiry() RETURNS double precision LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN min(mycelium.task_lease_end(a.claimed_at, a.ttl_minutes)) IS NOT NULL THEN
           greatest(0, extract(epoch FROM min(mycelium.task_lease_end(a.claimed_at, a.ttl_minutes)) - now()))
         END::double precision
  FROM mycelium.assignments a
  WHERE a.state = 'held'
    AND NOT EXISTS (SELECT 1 FROM mycelium.lease_expiries e WHERE e.claim_id = a.claim_id)
$$;
