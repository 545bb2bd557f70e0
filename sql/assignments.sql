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
COMMENT ON FUNCTION mycelium.task_lease_end IS 'public inlined';

-- A held lease is live until claimed_at + ttl (by the database clock).
CREATE OR REPLACE FUNCTION mycelium.task_lease_live(a mycelium.assignments) RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT a.state = 'held' AND a.owner IS NOT NULL AND now() < mycelium.task_lease_end(a.claimed_at, a.ttl_minutes)
$$;

-- ---------------------------------------------------------------------------------------------
-- Derived state.

-- The dependencies a row waits on: existing, unsettled board rows it `depends-on`, in the order
-- they are written. (A set-returning function of one row, so that a read of many rows — the board
-- views — has the planner fold it into its own plan, where a call per row costs a function call
-- each; waiting_on is the same answer as a value, for the verbs.)
CREATE OR REPLACE FUNCTION mycelium.row_waits(p_room text, p_key text) RETURNS TABLE (waiting_on text[])
LANGUAGE sql STABLE AS $$
  SELECT coalesce(array_agg(d.depends_on ORDER BY d.ord, d.depends_on), '{}')
  FROM mycelium.board_dependencies d
  JOIN mycelium.memories m ON m.room = d.room AND m.key = d.depends_on
  LEFT JOIN mycelium.assignments a ON a.room = m.room AND a.key = m.key
  WHERE d.room = p_room AND d.key = p_key AND mycelium.is_board_key(d.depends_on)
    AND NOT mycelium.row_settled(m.meta, a.state)
$$;
COMMENT ON FUNCTION mycelium.row_waits IS 'public inlined';

CREATE OR REPLACE FUNCTION mycelium.waiting_on(p_room text, p_key text) RETURNS text[] LANGUAGE sql STABLE AS $$
  SELECT w.waiting_on FROM mycelium.row_waits(p_room, p_key) w
$$;
COMMENT ON FUNCTION mycelium.waiting_on IS 'public inlined';

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
COMMENT ON FUNCTION mycelium.lease_assignment IS 'public inlined';

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
COMMENT ON FUNCTION mycelium.lease_read IS 'public inlined';

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

-- Every work/ row's lease. (room and key are the memory's own columns, not the function's, so a
-- filter on them reaches the memories' index and the lease is derived for the rows asked for only.
-- The lease is expanded column by column, `(lease_read(m, a)).*`, not read as one value from a
-- function in FROM: the planner then computes only the columns a read uses, where a function scan
-- builds every column of every row, what it waits on included.)
CREATE OR REPLACE VIEW mycelium.lease_states AS
  SELECT m.room, m.key, l.episode, l.version, l.title, l.assignment, l.stored_state, l.owner, l.claimed_at,
         l.ttl_minutes, l.expires_at, l.freshness, l.assignment_note, l.assignment_note_by, l.waiting_on,
         l.claim_id, l.lease_version
  FROM mycelium.memories m
  LEFT JOIN mycelium.assignments a ON a.room = m.room AND a.key = m.key
  CROSS JOIN LATERAL (SELECT (mycelium.lease_read(m, a)).*) l
  WHERE mycelium.is_assignable_key(m.key);

-- Every board row with what a board shows: status, kind, priority, lease, what it waits on, and
-- where it needs attention (resolved > in_flight > needs_you). The lease is derived from the row's
-- own memory and lease row, for the board rows a read asks for only; what it waits on is row_waits
-- planned into the read (the lease's own waiting_on column is not computed here).
CREATE OR REPLACE VIEW mycelium.board_rows AS
  SELECT m.room, m.key, split_part(m.key, '/', 1) AS namespace,
         mycelium.memory_title(m.value, m.meta) AS title,
         m.meta ->> 'status' AS status, m.meta ->> 'kind' AS kind, m.meta ->> 'priority' AS priority,
         m.meta ->> 'assignee' AS assignee, m.meta ->> 'blocked_by' AS blocked_by,
         m.meta ->> 'part-of' AS parent,
         m.episode, mycelium.episode_short_id(m.episode) AS short_id,
         m.version, m.created_by, m.updated_by, m.created_at, m.updated_at,
         l.assignment, l.owner, l.claimed_at, l.ttl_minutes, l.expires_at, l.freshness,
         w.waiting_on,
         CASE WHEN mycelium.row_settled(m.meta, l.stored_state) THEN 'resolved'
              WHEN m.meta ->> 'status' = 'in_review' OR l.assignment = 'held' THEN 'in_flight'
              ELSE 'needs_you' END AS attention
  FROM mycelium.memories m
  LEFT JOIN mycelium.assignments a ON a.room = m.room AND a.key = m.key
  LEFT JOIN LATERAL (SELECT (mycelium.lease_read(m, a)).*) l ON mycelium.is_assignable_key(m.key)
  CROSS JOIN LATERAL mycelium.row_waits(m.room, m.key) w
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
CREATE OR REPLACE TRIGGER t20_assignments_before_write BEFORE INSERT OR UPDATE ON mycelium.assignments
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
    -- ended by someone other than the live lease's holder: a forced release, a reviewer's resolve
    IF TG_OP = 'UPDATE' AND mycelium.task_lease_live(OLD) AND OLD.owner <> coalesce(NEW.note_by, by_handle) THEN
      extra := extra || jsonb_build_object('holder', OLD.owner)
               || CASE WHEN NEW.state = 'released' THEN '{"forced": true}'::jsonb ELSE '{}' END;
    END IF;
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
CREATE OR REPLACE TRIGGER t70_assignments_after_write AFTER INSERT OR UPDATE ON mycelium.assignments
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
CREATE OR REPLACE TRIGGER t90_assignments_settled AFTER INSERT OR UPDATE ON mycelium.assignments
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
CREATE OR REPLACE TRIGGER t10_assignments_before_delete BEFORE DELETE ON mycelium.assignments
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
COMMENT ON FUNCTION mycelium.read_assignment IS 'public read';

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
  h text := mycelium.require_handle(mycelium.author(p_handle));
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
COMMENT ON FUNCTION mycelium.claim_task IS 'public write';

-- Release: the row is free again, with a note (default 'released') and who left it. A settled row
-- (resolved, dismissed: its status or its lease) is not re-opened (409 already_resolved); a live
-- lease someone else holds is released only with p_force (else 409 not_holder naming the holder),
-- and the `released` notice then names the holder and says it was forced (assignments_after_write).
-- The lease row is locked before it is judged, so a claim racing in is either seen or waits.
CREATE OR REPLACE FUNCTION mycelium.release_task(p_room text, p_key text, p_handle text, p_note text DEFAULT NULL,
                                      p_force boolean DEFAULT false)
RETURNS mycelium.lease_read LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  h text := mycelium.require_handle(mycelium.author(p_handle));
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
  SELECT * INTO a FROM mycelium.assignments x WHERE x.room = p_room AND x.key = p_key FOR UPDATE;
  IF mycelium.row_settled(m.meta, a.state) THEN
    PERFORM mycelium.refuse(409, 'already_resolved',
      format('%L is %s: a settled row is not released (claim it to work on it again)', p_key,
             CASE WHEN m.meta ->> 'status' = ANY (mycelium.settled_statuses()) THEN m.meta ->> 'status'
                  ELSE 'resolved' END),
      jsonb_build_object('key', p_key, 'status', coalesce(m.meta ->> 'status', a.state)));
  END IF;
  IF mycelium.task_lease_live(a) AND a.owner <> h AND NOT coalesce(p_force, false) THEN
    PERFORM mycelium.refuse(409, 'not_holder',
      format('%L is held by @%s, not @%s: only the holder releases it (force to release it anyway)',
             p_key, a.owner, h),
      jsonb_build_object('key', p_key, 'owner', a.owner, 'claimed_at', a.claimed_at, 'ttl_minutes', a.ttl_minutes));
  END IF;
  -- behind the token gate, only an operator forces (base.sql: is_operator)
  IF mycelium.task_lease_live(a) AND a.owner <> h AND NOT mycelium.is_operator() THEN
    PERFORM mycelium.refuse(403, 'operator_only',
      format('%L is held by @%s: forcing its release is an operator''s word', p_key, a.owner),
      jsonb_build_object('key', p_key, 'owner', a.owner));
  END IF;
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
COMMENT ON FUNCTION mycelium.release_task IS 'public write';

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
  h text := mycelium.require_handle(mycelium.author(p_handle));
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
COMMENT ON FUNCTION mycelium.resolve_task IS 'public write';

-- Renew: refresh every lease p_handle holds in the room that is past half its time and still
-- live. Fresh leases are left alone (no write); expired ones are not brought back. No notices.
CREATE OR REPLACE FUNCTION mycelium.renew_tasks(p_room text, p_handle text)
RETURNS TABLE (key text, claimed_at timestamptz, ttl_minutes integer) LANGUAGE plpgsql AS $$
DECLARE h text := mycelium.require_handle(mycelium.author(p_handle));
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
COMMENT ON FUNCTION mycelium.renew_tasks IS 'public write';

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
COMMENT ON FUNCTION mycelium.sweep_expired_leases IS 'public write';

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
COMMENT ON FUNCTION mycelium.next_lease_expiry IS 'public read';
