-- Frozen: the definitions revision 0004_conversations applied when it was released (0.1.0).
-- (It needs pg_trgm, which migrations/env.py creates with the other extensions first.)
-- Never edit this file: change sql/ and, for tables, add a new revision.

-- ==== sql/handles.sql ====
-- Handles and @-mentions: the one normalisation, in the database.
--
-- Mirrors service/mycelium/core/handles.py and core/mentions.py exactly (contracts/mentions.json
-- holds the table of cases both sides assert). Every place the database compares handles (floors,
-- rosters, the await cursor, who a message wakes, search) goes through normalize_handle, so
-- '@Alice', 'alice' and 'alice#s1' are one member everywhere.
--
--   normalise: trim ASCII whitespace, drop every leading '@', drop everything from the first '#',
--              trim again, lowercase A-Z only (no locale can change the result);
--   valid:     ^[a-z0-9][a-z0-9_-]{0,63}$
--   mention:   '@handle' at the start of the text or after whitespace, '(' or '<'; '@~handle' is a
--              silent mention (named, never woken).

CREATE OR REPLACE FUNCTION mycelium.normalize_handle(p_raw text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT translate(
    btrim(split_part(ltrim(btrim(p_raw, E' \t\n\r\f\v'), '@'), '#', 1), E' \t\n\r\f\v'),
    'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')
$$;
COMMENT ON FUNCTION mycelium.normalize_handle(text) IS
  'The one spelling of a handle: no @, no #session suffix, no surrounding whitespace, A-Z lowercased.';

-- Is p_handle already in its one spelling? (PL/pgSQL for the CHECKs of hot tables: a CHECK is
-- prepared again for every statement that writes the table, and a SQL function in it would have its
-- body parsed again each time to be inlined; this body is compiled once per session.)
CREATE OR REPLACE FUNCTION mycelium.handle_is_normalised(p_handle text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RETURN p_handle = mycelium.normalize_handle(p_handle);
END
$$;

-- The code of what is wrong with a handle (after normalising), or NULL; same order as core/handles.
-- (PL/pgSQL: every verb checks its handles, and a valid one is answered by a single match.)
CREATE OR REPLACE FUNCTION mycelium.handle_problem(p_raw text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE h text := mycelium.normalize_handle(p_raw);
BEGIN
  IF h ~ '^[a-z0-9][a-z0-9_-]{0,63}$' THEN
    RETURN NULL;
  END IF;
  RETURN CASE
    WHEN h IS NULL OR h = '' THEN 'blank'
    WHEN length(h) > 64 THEN 'too_long'
    WHEN h !~ '^[a-z0-9]' THEN 'bad_start'
    WHEN h !~ '^[a-z0-9_-]*$' THEN 'bad_character'
  END;
END
$$;

CREATE OR REPLACE FUNCTION mycelium.handle_problem_sentence(p_code text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE p_code
    WHEN 'blank' THEN 'a handle must not be blank'
    WHEN 'too_long' THEN 'a handle has at most 64 characters'
    WHEN 'bad_start' THEN 'a handle must start with a letter a-z or a digit'
    WHEN 'bad_character' THEN 'a handle may contain only a-z, 0-9, ''_'' and ''-'''
  END
$$;

-- p_raw normalised, or a 422 refusal naming what is wrong (p_what says which handle it is).
-- (A valid handle costs one normalisation and one match; only a bad one is examined further.)
CREATE OR REPLACE FUNCTION mycelium.require_handle(p_raw text, p_what text DEFAULT 'handle') RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  h text := mycelium.normalize_handle(p_raw);
  problem text;
BEGIN
  IF h ~ '^[a-z0-9][a-z0-9_-]{0,63}$' THEN
    RETURN h;
  END IF;
  problem := mycelium.handle_problem(p_raw);
  IF problem IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'invalid_handle',
      format('%s: %s (got %L)', p_what, mycelium.handle_problem_sentence(problem), coalesce(p_raw, '')),
      jsonb_build_object('field', p_what, 'problem', problem, 'handle', p_raw));
  END IF;
  RETURN h;
END
$$;

-- Every mention in a text, in the order first seen, each (handle, form) once.
CREATE OR REPLACE FUNCTION mycelium.mentions_in(p_text text)
RETURNS TABLE (handle text, silent boolean, first_seen bigint)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT mycelium.normalize_handle(m[2]), m[1] = '~', min(ord)
  FROM regexp_matches(coalesce(p_text, ''), '(?:^|(?<=[\s(<]))@(~?)([A-Za-z0-9][A-Za-z0-9_-]*)', 'g')
       WITH ORDINALITY AS t (m, ord)
  WHERE strpos(p_text, '@') > 0  -- most texts name nobody: skip the pattern
  GROUP BY 1, 2
$$;

-- The handles a text wakes (its @handle mentions), first-seen order.
-- (PL/pgSQL, not SQL: the timeline's generated columns call these two, and a PL/pgSQL function is
-- compiled once per session where a SQL one would be parsed again for every INSERT statement.)
CREATE OR REPLACE FUNCTION mycelium.loud_mentions(p_text text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  IF strpos(p_text, '@') = 0 THEN
    RETURN '{}';
  END IF;
  RETURN (SELECT coalesce(array_agg(handle ORDER BY first_seen), '{}')
          FROM mycelium.mentions_in(p_text) WHERE NOT silent);
END
$$;

-- The handles a text names silently (its @~handle mentions), first-seen order.
CREATE OR REPLACE FUNCTION mycelium.silent_mentions(p_text text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  IF strpos(p_text, '@~') = 0 THEN
    RETURN '{}';
  END IF;
  RETURN (SELECT coalesce(array_agg(handle ORDER BY first_seen), '{}')
          FROM mycelium.mentions_in(p_text) WHERE silent);
END
$$;

-- The await loop's text test: does p_text wake p_handle with an @handle in it?
CREATE OR REPLACE FUNCTION mycelium.mentions_handle(p_text text, p_handle text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT mycelium.normalize_handle(p_handle) = ANY (mycelium.loud_mentions(p_text))
$$;

-- ==== sql/conversations.sql ====
-- Conversations on the timeline: who a message names and wakes, pings, amendments, the post verb.
--
-- Builds on messages.sql (the append-only table with per-room, gapless, commit-ordered positions).
--   * mentions, silent_mentions and wakes are derived from the row itself on insert, so a plain
--     INSERT in psql gets exactly what the hub's verbs get, and nobody can write them by hand;
--   * wakes = the handles this message is a turn for (the await rule of contracts/message-envelope):
--     an exchange whose payload is not a control signal, addressed to its recipients and its
--     @-mentions, never to its own sender; an amendment wakes nobody (the original already did);
--   * a write into a thread raises a ping into the room's channel in the same transaction (which
--     thread moved, who wrote, which message: never the prose);
--   * a message that wakes somebody sends a hint on mycelium_wakes naming them, so each hub
--     process wakes only the waiters it concerns; state is always re-read from the tables.
--   * an amendment is a new exchange:amend message parented on the original; reads fold the chain
--     to the newest text (view mycelium.timeline).

CREATE OR REPLACE FUNCTION mycelium.message_wakes(
  p_kind text, p_subkind text, p_payload_type text, p_sender text, p_recipients text[], p_content text
) RETURNS text[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  me text;
  given text;
  one text;
  woken text[] := '{}';
BEGIN
  IF p_kind <> 'exchange' OR coalesce(p_subkind, '') = 'amend'
     OR p_payload_type IN ('presence', 'keepalive', 'ping', 'notice') THEN
    RETURN '{}';
  END IF;
  -- the recipients in the order given, then the loud mentions in the order first seen; each once,
  -- never the sender (a loop, no query to plan and run)
  me := mycelium.normalize_handle(p_sender);
  FOREACH given IN ARRAY coalesce(p_recipients, '{}') || mycelium.loud_mentions(p_content) LOOP
    one := mycelium.normalize_handle(given);
    IF one <> '' AND one <> me AND NOT (one = ANY (woken)) THEN
      woken := woken || one;
    END IF;
  END LOOP;
  RETURN woken;
END
$$;
COMMENT ON FUNCTION mycelium.message_wakes(text,text,text,text,text[],text) IS
  'The handles a message is a turn for: recipients and @-mentions of a non-control exchange, minus its sender.';

-- Derived from the row itself, never from the writer: the write gate's BEFORE INSERT trigger
-- (messages_admit, floors.sql) sets all three on every insert, overwriting whatever an INSERT gave,
-- so a plain INSERT in psql gets exactly what the hub's verbs get and nobody can forge a wake (the
-- table is append-only: an insert is the only moment they are set). Not STORED generated columns:
-- those expressions are set up again for every INSERT statement, where the trigger's PL/pgSQL is
-- compiled once per session and parses nothing for a row with no prose and no recipients (a notice,
-- a ping). Rows older than this file are board notices, for which '{}' is exact.
ALTER TABLE mycelium.messages
  ADD COLUMN mentions text[] NOT NULL DEFAULT '{}',
  ADD COLUMN silent_mentions text[] NOT NULL DEFAULT '{}',
  ADD COLUMN wakes text[] NOT NULL DEFAULT '{}';

-- Who a message was ever for, to anchor a new handle's inbox (inbox_anchor); notices, pings and
-- messages to nobody are left out, so appending them costs this index nothing.
CREATE INDEX messages_wakes ON mycelium.messages USING gin (wakes) WHERE cardinality(wakes) > 0;
CREATE INDEX messages_amendments ON mycelium.messages (room, (parents[1]), position)
  WHERE subkind = 'amend';

-- The timeline as people read it: amendments folded into the message they amend (its newest text,
-- and edited_at), amendment rows themselves left out.
CREATE OR REPLACE VIEW mycelium.timeline AS
SELECT m.*, coalesce(a.content, m.content) AS text, a.created_at AS edited_at
FROM mycelium.messages m
LEFT JOIN LATERAL (
  SELECT x.content, x.created_at FROM mycelium.messages x
  WHERE x.room = m.room AND x.subkind = 'amend' AND x.parents[1] = m.id
  ORDER BY x.position DESC LIMIT 1
) a ON true
WHERE NOT (coalesce(m.subkind, '') = 'amend' AND cardinality(m.parents) > 0);

-- An episode reference as a URN of p_room: NULL, '' and 'live' are the room's channel; anything
-- not starting with 'urn:' is a thread's short id.
CREATE OR REPLACE FUNCTION mycelium.episode_ref(p_room text, p_ref text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN p_ref IS NULL OR btrim(p_ref) = '' OR btrim(p_ref) = 'live' THEN mycelium.live_episode(p_room)
    WHEN btrim(p_ref) LIKE 'urn:%' THEN btrim(p_ref)
    ELSE mycelium.episode_urn(p_room, btrim(p_ref))
  END
$$;

-- ---------------------------------------------------------------------------------------------
-- Triggers: the ping, the wake hint and the search document.

-- One AFTER trigger for all three (each trigger on the table is one more call per insert, and a WHEN
-- clause is deserialised and planned again for every INSERT statement, a PL/pgSQL body once per
-- session): the ping first, then the wake hint, so the ping's own hint comes before it.
--   ping: a write into a thread (not the room's channel, and prose) raises one in the channel;
--   wake: a message that is somebody's turn hints '<position>\t<room>\t<handle>,<handle>…' on
--         mycelium_wakes ('*' instead of the list when it would not fit);
--   search: the message's document (message_search.sql: index_message), or, for an amendment, its
--         original's document rewritten with the newest text; a notice has none (its document is
--         derived by the message_documents view when a search looks through notices).
CREATE OR REPLACE FUNCTION mycelium.messages_follow_up() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  who text;
  kept text;
  original mycelium.messages;
  indexed bigint;
BEGIN
  IF NEW.episode <> mycelium.live_episode(NEW.room)
     AND NEW.payload_type NOT IN ('ping', 'notice', 'presence', 'keepalive') THEN
    INSERT INTO mycelium.messages (room, episode, kind, payload_type, sender, sender_role, payload)
    VALUES (NEW.room, mycelium.live_episode(NEW.room), 'exchange', 'ping', 'system', 'coordinator',
            jsonb_build_object('episode', NEW.episode, 'sender', NEW.sender, 'message', NEW.id::text));
  END IF;
  IF cardinality(NEW.wakes) > 0 THEN
    who := array_to_string(NEW.wakes, ',');
    IF octet_length(who) + octet_length(NEW.room) > 7000 THEN
      who := '*';
    END IF;
    -- by assignment, as in messages_after_insert (a PERFORM would start a query)
    kept := mycelium.wake_hint('mycelium_wakes', NEW.position || E'\t' || NEW.room || E'\t' || who);
  END IF;
  IF NEW.subkind = 'amend' AND cardinality(NEW.parents) > 0 THEN
    SELECT * INTO original FROM mycelium.messages WHERE room = NEW.room AND id = NEW.parents[1];
    IF FOUND THEN
      indexed := mycelium.index_message(original, NEW.content, NEW.created_at,
                                        mycelium.named_handles(NEW.content));
    END IF;
  ELSIF NOT mycelium.stored_without_document(NEW.payload_type, NEW.payload, NEW.subkind, NEW.parents) THEN
    indexed := mycelium.index_message(NEW, NEW.content, NULL,
      CASE WHEN cardinality(NEW.mentions) + cardinality(NEW.silent_mentions) = 0 THEN '{}'
           ELSE mycelium.named_handles(NEW.content) END);
  END IF;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER messages_follow_up AFTER INSERT ON mycelium.messages
  FOR EACH ROW EXECUTE FUNCTION mycelium.messages_follow_up();

-- ---------------------------------------------------------------------------------------------
-- Verbs.

-- Post one message. Every write passes the thread write gate (floors.sql) on insert. The sender and
-- recipients are stored normalised; p_episode may be a URN, a thread's short id, or NULL (the room).
CREATE OR REPLACE FUNCTION mycelium.post_message(
  p_room text, p_sender text, p_content text, p_episode text DEFAULT NULL,
  p_recipients text[] DEFAULT '{}', p_kind text DEFAULT 'exchange', p_subkind text DEFAULT NULL,
  p_payload_type text DEFAULT 'message', p_payload jsonb DEFAULT '{}', p_parents uuid[] DEFAULT '{}',
  p_sender_role text DEFAULT 'agent'
) RETURNS mycelium.messages LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  sender text;
  given text;
  recipients text[] := '{}';
  unknown uuid[];
  r mycelium.messages;
BEGIN
  PERFORM mycelium.require_room(p_room);
  sender := mycelium.require_handle(p_sender, 'sender');
  -- (loops and guards rather than queries over empty or one-element arrays: each query is an
  -- executor start-up on every post)
  FOREACH given IN ARRAY coalesce(p_recipients, '{}') LOOP
    recipients := recipients || mycelium.require_handle(given, 'recipient');
  END LOOP;
  IF p_payload IS NOT NULL AND jsonb_typeof(p_payload) <> 'object' THEN
    PERFORM mycelium.refuse(422, 'invalid_payload', 'a message payload is a JSON object');
  END IF;
  IF cardinality(p_parents) > 0 THEN
    SELECT array_agg(p) INTO unknown FROM unnest(p_parents) p
    WHERE NOT EXISTS (SELECT 1 FROM mycelium.messages m WHERE m.room = p_room AND m.id = p);
  END IF;
  IF unknown IS NOT NULL THEN
    PERFORM mycelium.refuse(422, 'unknown_parent',
      format('no message %s in room %L to answer', array_to_string(unknown, ', '), p_room),
      jsonb_build_object('parents', unknown));
  END IF;
  PERFORM set_config('mycelium.actor', sender, true);
  INSERT INTO mycelium.messages (room, episode, kind, subkind, payload_type, sender, sender_role,
                                 recipients, parents, content, payload)
  VALUES (p_room, mycelium.episode_ref(p_room, p_episode), coalesce(p_kind, 'exchange'),
          nullif(p_subkind, ''), coalesce(p_payload_type, 'message'), sender,
          coalesce(p_sender_role, 'agent'), recipients, coalesce(p_parents, '{}'), coalesce(p_content, ''),
          coalesce(p_payload, '{}'))
  RETURNING * INTO r;
  RETURN r;
END
$$;

-- Amend a message: a new exchange:amend parented on the original (an amendment of an amendment
-- amends the original). Only the original sender may amend. Returns the original, folded.
CREATE OR REPLACE FUNCTION mycelium.amend_message(p_room text, p_id uuid, p_content text, p_by text)
RETURNS mycelium.timeline LANGUAGE plpgsql AS $$
DECLARE
  target mycelium.messages;
  by_handle text;
  r mycelium.timeline;
BEGIN
  PERFORM mycelium.require_room(p_room);
  SELECT * INTO target FROM mycelium.messages WHERE room = p_room AND id = p_id;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse(404, 'message_not_found', format('no message %s in room %L', p_id, p_room),
                            jsonb_build_object('room', p_room, 'id', p_id));
  END IF;
  IF target.subkind = 'amend' AND cardinality(target.parents) > 0 THEN
    SELECT * INTO target FROM mycelium.messages WHERE room = p_room AND id = target.parents[1];
  END IF;
  IF target.payload_type IN ('ping', 'notice', 'presence', 'keepalive') THEN
    PERFORM mycelium.refuse(422, 'not_amendable',
      format('a %s is not prose: it cannot be amended', target.payload_type), jsonb_build_object('id', p_id));
  END IF;
  IF p_content IS NULL OR btrim(p_content) = '' THEN
    PERFORM mycelium.refuse(422, 'empty_content', 'an amendment needs the new text');
  END IF;
  by_handle := mycelium.require_handle(coalesce(p_by, target.sender), 'sender_handle');
  IF by_handle <> mycelium.normalize_handle(target.sender) THEN
    PERFORM mycelium.refuse(403, 'not_sender',
      format('only @%s may amend their message; @%s may not', mycelium.normalize_handle(target.sender), by_handle),
      jsonb_build_object('id', target.id, 'sender', target.sender));
  END IF;
  PERFORM set_config('mycelium.actor', by_handle, true);
  INSERT INTO mycelium.messages (room, episode, kind, subkind, payload_type, sender, sender_role,
                                 recipients, parents, content, payload)
  VALUES (p_room, target.episode, 'exchange', 'amend', target.payload_type, target.sender,
          target.sender_role, target.recipients, ARRAY[target.id], p_content, target.payload);
  SELECT * INTO r FROM mycelium.timeline WHERE room = p_room AND id = target.id;
  RETURN r;
END
$$;

-- ==== sql/floors.sql ====
-- Floors, frozen rosters, and the thread write gate.
--
-- Who may write into a thread is decided here, on insert into mycelium.messages, for every writer
-- (a hub replica, an engine, a person in psql). In this order (research/hub.md §4):
--   1. the room's own channel (live) is open to everyone and never holds a floor;
--   2. a thread nobody knows (no memory is bound to it and nothing was ever written in it) → 404;
--   3. a frozen negotiation admits only the roster it froze on (and whoever froze it) → 403;
--   4. a held floor admits only its holder and the speakers the holder gave it to → 409, naming the
--      holder and who may speak.
-- A refused write raises, so it never lands and wakes nobody.
--
-- Floors and rosters are rows per (room, thread). The gate takes a share lock on them, so a floor
-- change and a write into that thread are ordered: a write never lands under a floor that was
-- already replaced. A floor change raises a `floor` notice naming the task row, in the same
-- transaction, whoever makes it (the verbs below or a direct write).

CREATE TABLE mycelium.floors (
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  episode text NOT NULL,
  holder text NOT NULL,
  speakers text[] NOT NULL DEFAULT '{}',
  held_by text,
  held_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, episode),
  CONSTRAINT floor_not_on_live CHECK (episode <> mycelium.live_episode(room)),
  CONSTRAINT floor_holder_normalised CHECK (holder = mycelium.normalize_handle(holder)
                                            AND mycelium.handle_problem(holder) IS NULL)
);

CREATE TABLE mycelium.rosters (
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  episode text NOT NULL,
  members text[] NOT NULL,
  frozen_by text NOT NULL,
  frozen_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, episode),
  CONSTRAINT roster_not_on_live CHECK (episode <> mycelium.live_episode(room))
);

-- A handle list as the database keeps it: normalised, each once, in the order given.
CREATE OR REPLACE FUNCTION mycelium.handle_list(p_handles text[], p_what text DEFAULT 'handle') RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(array_agg(h ORDER BY first_seen), '{}')
  FROM (
    SELECT mycelium.require_handle(x, p_what) AS h, min(o) AS first_seen
    FROM unnest(coalesce(p_handles, '{}')) WITH ORDINALITY AS t (x, o)
    GROUP BY 1
  ) l
$$;

CREATE OR REPLACE FUNCTION mycelium.thread_known(p_room text, p_episode text) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT EXISTS (SELECT 1 FROM mycelium.memories WHERE room = p_room AND episode = p_episode)
      OR EXISTS (SELECT 1 FROM mycelium.messages WHERE room = p_room AND episode = p_episode)
$$;

-- '@conductor holds the floor; @api, @web may speak' / '…; no one else may speak right now'.
CREATE OR REPLACE FUNCTION mycelium.describe_floor(p_holder text, p_speakers text[]) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT format('@%s holds the floor; ', p_holder)
      || CASE WHEN cardinality(coalesce(p_speakers, '{}')) = 0 THEN 'no one else may speak right now'
              ELSE (SELECT string_agg('@' || s, ', ' ORDER BY o) FROM unnest(p_speakers) WITH ORDINALITY AS t (s, o))
                   || ' may speak' END
$$;

-- ---------------------------------------------------------------------------------------------
-- The gate.

CREATE OR REPLACE FUNCTION mycelium.check_thread_write(p_room text, p_episode text, p_handle text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  h text;
  short text;
  roster mycelium.rosters;
  fl mycelium.floors;
BEGIN
  IF p_episode IS NULL OR p_episode = mycelium.live_episode(p_room) THEN
    RETURN;
  END IF;
  h := mycelium.normalize_handle(p_handle);
  short := mycelium.episode_short_id(p_episode);
  IF NOT mycelium.thread_known(p_room, p_episode) THEN
    PERFORM mycelium.refuse(404, 'thread_not_found', format('No thread ''%s'' in room ''%s''', short, p_room),
                            jsonb_build_object('room', p_room, 'episode', p_episode));
  END IF;
  SELECT * INTO roster FROM mycelium.rosters WHERE room = p_room AND episode = p_episode FOR SHARE;
  IF FOUND AND NOT (h = ANY (roster.members) OR h = roster.frozen_by) THEN
    PERFORM mycelium.refuse(403, 'not_in_roster',
      format('@%s is not a member of the negotiation in thread ''%s''', h, short),
      jsonb_build_object('episode', p_episode, 'handle', h, 'roster', roster.members));
  END IF;
  SELECT * INTO fl FROM mycelium.floors WHERE room = p_room AND episode = p_episode FOR SHARE;
  IF FOUND AND NOT (h = fl.holder OR h = ANY (fl.speakers)) THEN
    PERFORM mycelium.refuse(409, 'not_your_floor',
      format('@%s does not have the floor: %s', h, mycelium.describe_floor(fl.holder, fl.speakers)),
      jsonb_build_object('episode', p_episode, 'handle', h, 'holder', fl.holder, 'speakers', fl.speakers));
  END IF;
END
$$;
COMMENT ON FUNCTION mycelium.check_thread_write(text,text,text) IS
  'The thread write gate (404 unknown thread, 403 outside a frozen roster, 409 not admitted by the floor).';

-- Named to fire before messages_before_insert (which allocates the position): a refused write
-- never touches the room's position counter. A write into the room's own channel (no episode, '',
-- or the live URN: every notice and ping) is open to everyone.
-- The same trigger then sets the row's derived columns (conversations.sql), whatever the INSERT
-- gave: who the text names, loud and silent, and whom the message wakes. (One trigger for both:
-- each trigger on the table is one more call per insert.) A row with no '@' in its text names
-- nobody, and one that names nobody and has no recipients wakes nobody, so a notice or a ping
-- parses nothing.
CREATE OR REPLACE FUNCTION mycelium.messages_admit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF coalesce(NEW.episode, '') <> '' AND NEW.episode <> mycelium.live_episode(NEW.room) THEN
    PERFORM mycelium.check_thread_write(NEW.room, NEW.episode, NEW.sender);
  END IF;
  IF strpos(NEW.content, '@') = 0 THEN
    NEW.mentions := '{}';
    NEW.silent_mentions := '{}';
  ELSE
    NEW.mentions := mycelium.loud_mentions(NEW.content);
    NEW.silent_mentions := mycelium.silent_mentions(NEW.content);
  END IF;
  NEW.wakes := CASE WHEN cardinality(NEW.mentions) = 0 AND cardinality(NEW.recipients) = 0 THEN '{}'
                    ELSE mycelium.message_wakes(NEW.kind, NEW.subkind, NEW.payload_type, NEW.sender,
                                                NEW.recipients, NEW.content) END;
  RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER messages_admit BEFORE INSERT ON mycelium.messages
  FOR EACH ROW EXECUTE FUNCTION mycelium.messages_admit();

-- ---------------------------------------------------------------------------------------------
-- Floor rows: normalised on the way in, and every change announced.

CREATE OR REPLACE FUNCTION mycelium.floors_before_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.episode = mycelium.live_episode(NEW.room) THEN
    PERFORM mycelium.refuse(422, 'live_has_no_floor', 'the room''s own channel never holds a floor',
                            jsonb_build_object('room', NEW.room));
  END IF;
  IF TG_OP = 'UPDATE' AND (NEW.room, NEW.episode) IS DISTINCT FROM (OLD.room, OLD.episode) THEN
    PERFORM mycelium.refuse(409, 'immutable', 'a floor belongs to one thread; release it and hold another');
  END IF;
  IF TG_OP = 'INSERT' AND NOT mycelium.thread_known(NEW.room, NEW.episode) THEN
    PERFORM mycelium.refuse(404, 'thread_not_found',
      format('No thread ''%s'' in room ''%s''', mycelium.episode_short_id(NEW.episode), NEW.room),
      jsonb_build_object('room', NEW.room, 'episode', NEW.episode));
  END IF;
  NEW.holder := mycelium.require_handle(NEW.holder, 'holder');
  NEW.speakers := array_remove(mycelium.handle_list(NEW.speakers, 'speaker'), NEW.holder);
  NEW.held_at := now();
  RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER floors_before_write BEFORE INSERT OR UPDATE ON mycelium.floors
  FOR EACH ROW EXECUTE FUNCTION mycelium.floors_before_write();

CREATE OR REPLACE FUNCTION mycelium.floors_after_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  f mycelium.floors := CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
  row_key text;
  row_title text;
  data jsonb;
BEGIN
  IF TG_OP = 'UPDATE' AND (NEW.holder, NEW.speakers) IS NOT DISTINCT FROM (OLD.holder, OLD.speakers) THEN
    RETURN NULL;  -- the same floor held again: nothing moved
  END IF;
  IF TG_OP = 'DELETE' AND NOT EXISTS (SELECT 1 FROM mycelium.rooms WHERE name = OLD.room) THEN
    RETURN NULL;  -- the room is going
  END IF;
  SELECT b.key, b.title INTO row_key, row_title FROM mycelium.row_of_episode(f.room, f.episode) b;
  data := jsonb_build_object(
    'title', row_title, 'episode', f.episode, 'holder', f.holder,
    'speakers', array_to_string(f.speakers, ','), 'by', coalesce(f.held_by, f.holder));
  IF TG_OP = 'DELETE' THEN
    data := data || jsonb_build_object('released', '1',
                                       'by', coalesce(nullif(current_setting('mycelium.actor', true), ''), f.holder));
  END IF;
  PERFORM mycelium.post_notice(f.room, 'floor', coalesce(row_key, mycelium.episode_short_id(f.episode)), data);
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER floors_after_write AFTER INSERT OR UPDATE OR DELETE ON mycelium.floors
  FOR EACH ROW EXECUTE FUNCTION mycelium.floors_after_write();

-- ---------------------------------------------------------------------------------------------
-- Verbs.

-- Hold (or re-hold) a thread's floor for p_holder, admitting p_speakers too. Re-holding replaces;
-- holding exactly the same floor again changes nothing and announces nothing.
CREATE OR REPLACE FUNCTION mycelium.hold_floor(
  p_room text, p_episode text, p_holder text, p_speakers text[] DEFAULT '{}', p_by text DEFAULT NULL
) RETURNS mycelium.floors LANGUAGE plpgsql AS $$
DECLARE
  ep text := mycelium.episode_ref(p_room, p_episode);
  holder text;
  speakers text[];
  r mycelium.floors;
BEGIN
  PERFORM mycelium.require_room(p_room);
  holder := mycelium.require_handle(p_holder, 'holder');
  speakers := array_remove(mycelium.handle_list(p_speakers, 'speaker'), holder);
  IF p_by IS NOT NULL THEN PERFORM set_config('mycelium.actor', p_by, true); END IF;
  INSERT INTO mycelium.floors AS f (room, episode, holder, speakers, held_by)
  VALUES (p_room, ep, holder, speakers, coalesce(mycelium.normalize_handle(p_by), holder))
  ON CONFLICT (room, episode) DO UPDATE SET holder = excluded.holder, speakers = excluded.speakers,
                                            held_by = excluded.held_by
    WHERE (f.holder, f.speakers) IS DISTINCT FROM (excluded.holder, excluded.speakers)
  RETURNING * INTO r;
  IF r.room IS NULL THEN
    SELECT * INTO r FROM mycelium.floors WHERE room = p_room AND episode = ep;
  END IF;
  RETURN r;
END
$$;

-- Release a thread's floor: true if one was held (and is now gone), false if there was none.
CREATE OR REPLACE FUNCTION mycelium.release_floor(p_room text, p_episode text, p_by text DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF p_by IS NOT NULL THEN PERFORM set_config('mycelium.actor', mycelium.normalize_handle(p_by), true); END IF;
  DELETE FROM mycelium.floors WHERE room = p_room AND episode = mycelium.episode_ref(p_room, p_episode);
  RETURN FOUND;
END
$$;

-- Freeze a negotiation's roster in a thread: from now on only p_members (and p_by, who runs it)
-- may write there. Freezing again replaces the roster.
CREATE OR REPLACE FUNCTION mycelium.freeze_roster(p_room text, p_episode text, p_members text[], p_by text)
RETURNS mycelium.rosters LANGUAGE plpgsql AS $$
DECLARE
  ep text := mycelium.episode_ref(p_room, p_episode);
  r mycelium.rosters;
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF ep = mycelium.live_episode(p_room) THEN
    PERFORM mycelium.refuse(422, 'live_has_no_roster', 'a negotiation runs in a thread, not the room''s channel');
  END IF;
  IF NOT mycelium.thread_known(p_room, ep) THEN
    PERFORM mycelium.refuse(404, 'thread_not_found',
      format('No thread ''%s'' in room ''%s''', mycelium.episode_short_id(ep), p_room),
      jsonb_build_object('room', p_room, 'episode', ep));
  END IF;
  INSERT INTO mycelium.rosters AS x (room, episode, members, frozen_by)
  VALUES (p_room, ep, mycelium.handle_list(p_members, 'member'), mycelium.require_handle(p_by, 'frozen_by'))
  ON CONFLICT (room, episode) DO UPDATE SET members = excluded.members, frozen_by = excluded.frozen_by,
                                            frozen_at = now()
  RETURNING * INTO r;
  RETURN r;
END
$$;

CREATE OR REPLACE FUNCTION mycelium.thaw_roster(p_room text, p_episode text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM mycelium.rosters WHERE room = p_room AND episode = mycelium.episode_ref(p_room, p_episode);
  RETURN FOUND;
END
$$;

-- ==== sql/participation.sql ====
-- Participation: the durable per-handle inbox behind `await`, the reply verb, and presence leases.
--
-- A member that cannot hold a socket between its turns is kept by the database instead:
--   * delivery_cursors: per (room, handle), the position up to which everything addressed to the
--     handle has been delivered (or was never addressed to it). Positions are gapless and commit
--     ordered (messages.sql), so "everything up to N" never gains a late N-1: nothing is skipped.
--     A handle seen for the first time is anchored just before the first message that ever
--     addressed it (the mention that summoned it), else at the head: what was said to it before
--     its first await is delivered, nothing older is dumped on it.
--   * early_deliveries: messages above the cursor already delivered by a thread-scoped await, so
--     a room-wide await never serves them again. The cursor then moves over them and they go.
--   * take_next() takes the handle's lock (a transaction-scoped advisory lock, so a poll that finds
--     nothing writes nothing), picks the next addressed message, records it and moves the cursor
--     in one transaction: two concurrent awaits of one handle get different messages, a crash
--     between pick and commit delivers nothing (the message stays pending). A take that delivers
--     commits durably; one that only moves the cursor over what was not for the handle commits
--     asynchronously (losing it in a crash only means that stretch is scanned again).
--   * presence: a lease per (room, handle), refreshed by every await poll and reply; a member is
--     present while its lease runs (config presence.ttl_seconds, default 90 s, or longer to
--     cover a long poll).

CREATE TABLE mycelium.delivery_cursors (
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  handle text NOT NULL,
  position bigint NOT NULL CHECK (position >= 0),
  woken_by uuid,
  woken_episode text,
  woken_sender text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, handle),
  CONSTRAINT cursor_handle_normalised CHECK (mycelium.handle_is_normalised(handle))
);
COMMENT ON TABLE mycelium.delivery_cursors IS
  'Durable inbox cursors: every message at or below position was delivered to handle or was not for it.';

CREATE TABLE mycelium.early_deliveries (
  room text NOT NULL,
  handle text NOT NULL,
  position bigint NOT NULL,
  delivered_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, handle, position),
  FOREIGN KEY (room, handle) REFERENCES mycelium.delivery_cursors (room, handle) ON DELETE CASCADE
);

CREATE TABLE mycelium.presence (
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  handle text NOT NULL,
  expires_at timestamptz NOT NULL,
  seen_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, handle)
);

-- A cursor only moves forward: moving it back would deliver a message twice.
CREATE OR REPLACE FUNCTION mycelium.delivery_cursors_forward() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.position < OLD.position OR (NEW.room, NEW.handle) IS DISTINCT FROM (OLD.room, OLD.handle) THEN
    PERFORM mycelium.refuse(409, 'cursor_backwards',
      format('the inbox cursor of @%s only moves forward (%s → %s refused)', OLD.handle, OLD.position, NEW.position),
      jsonb_build_object('room', OLD.room, 'handle', OLD.handle, 'position', OLD.position));
  END IF;
  NEW.updated_at := now();
  RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER delivery_cursors_forward BEFORE UPDATE ON mycelium.delivery_cursors
  FOR EACH ROW EXECUTE FUNCTION mycelium.delivery_cursors_forward();

-- Where a handle's inbox starts when it is first seen (one snapshot, so nothing slips between).
CREATE OR REPLACE FUNCTION mycelium.inbox_anchor(p_room text, p_handle text) RETURNS bigint
LANGUAGE sql STABLE AS $$
  SELECT coalesce(
    (SELECT min(position) - 1 FROM mycelium.messages
     WHERE room = p_room AND wakes @> ARRAY[p_handle] AND cardinality(wakes) > 0),
    (SELECT last FROM mycelium.message_positions WHERE room = p_room),
    0)
$$;

-- Refresh p_handle's presence in p_room for presence.ttl_seconds, or p_hold_seconds if longer. A
-- lease that already runs that long (within 10 s) is left alone: a poll loop costs no write.
CREATE OR REPLACE FUNCTION mycelium.touch_presence(p_room text, p_handle text, p_hold_seconds double precision DEFAULT 0)
RETURNS mycelium.presence LANGUAGE plpgsql AS $$
DECLARE
  h text := mycelium.require_handle(p_handle);
  ttl double precision;
  wanted timestamptz;
  r mycelium.presence;
BEGIN
  -- the lease and the room's ttl (as mycelium.config_value reads it) in one statement
  SELECT p.*, (SELECT c.value #>> '{}' FROM mycelium.config c
               WHERE c.name = 'presence.ttl_seconds' AND c.room IN (coalesce(p_room, ''), '')
               ORDER BY c.room DESC LIMIT 1)::double precision
    INTO r.room, r.handle, r.expires_at, r.seen_at, ttl
  FROM (SELECT) one LEFT JOIN mycelium.presence p ON p.room = p_room AND p.handle = h;
  wanted := now() + make_interval(secs => greatest(coalesce(ttl, 90), coalesce(p_hold_seconds, 0)));
  IF r.room IS NOT NULL AND r.expires_at >= wanted - interval '10 seconds' THEN
    RETURN r;
  END IF;
  PERFORM mycelium.require_room(p_room);
  INSERT INTO mycelium.presence AS p (room, handle, expires_at, seen_at)
  VALUES (p_room, h, wanted, now())
  ON CONFLICT (room, handle) DO UPDATE
    SET expires_at = greatest(p.expires_at, excluded.expires_at), seen_at = excluded.seen_at
  RETURNING * INTO r;
  RETURN r;
END
$$;

-- Take the next message addressed to p_handle: in the whole room, or only in thread p_episode.
-- Returns the message (amendments folded) or no row; either way the cursor has moved past
-- everything that was not for the handle. Refreshes the handle's presence.
CREATE OR REPLACE FUNCTION mycelium.take_next(
  p_room text, p_handle text, p_episode text DEFAULT NULL, p_hold_seconds double precision DEFAULT 0
) RETURNS SETOF mycelium.timeline LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  h text := mycelium.require_handle(p_handle);
  scope text;
  cur mycelium.delivery_cursors;
  hit mycelium.messages;
  shown mycelium.timeline;
  settled bigint;
  pending bigint[];
  scanned bigint;
  next_pending bigint;
  head bigint;
  new_position bigint;
  present mycelium.presence;
  ttl double precision;
  state text;
BEGIN
  -- The lease as touch_presence reads it; that call (a write, and a security-definer call) only
  -- when the lease runs short of what touch_presence would make it, which most looks do not find.
  SELECT p.*, (SELECT c.value #>> '{}' FROM mycelium.config c
               WHERE c.name = 'presence.ttl_seconds' AND c.room IN (p_room, '')
               ORDER BY c.room DESC LIMIT 1)::double precision
    INTO present.room, present.handle, present.expires_at, present.seen_at, ttl
  FROM (SELECT) one LEFT JOIN mycelium.presence p ON p.room = p_room AND p.handle = h;
  IF present.room IS NULL OR present.expires_at < now() - interval '10 seconds'
       + make_interval(secs => greatest(coalesce(ttl, 90), coalesce(p_hold_seconds, 0))) THEN
    present := mycelium.touch_presence(p_room, h, p_hold_seconds);
  END IF;
  IF p_episode IS NOT NULL THEN
    scope := nullif(mycelium.episode_ref(p_room, p_episode), mycelium.live_episode(p_room));
  END IF;

  -- one take per handle at a time; every statement below reads after the previous take committed
  PERFORM pg_advisory_xact_lock(hashtext('mycelium.inbox:' || p_room), hashtext(h));
  SELECT * INTO cur FROM mycelium.delivery_cursors WHERE room = p_room AND handle = h;
  IF NOT FOUND THEN
    INSERT INTO mycelium.delivery_cursors (room, handle, position)
    VALUES (p_room, h, mycelium.inbox_anchor(p_room, h)) ON CONFLICT DO NOTHING;
    SELECT * INTO cur FROM mycelium.delivery_cursors WHERE room = p_room AND handle = h;
  END IF;

  -- Everything up to `settled` is delivered or not for the handle: a room-wide hit is the first
  -- pending message, so it settles what lies below it; a thread's hit is recorded as delivered early.
  -- The message still pending after that, and the head, are read in one snapshot: the cursor may
  -- move up to just before that message, or to the head when nothing is pending.
  settled := cur.position;
  IF scope IS NULL THEN
    -- Look through a window of at most 256 positions at a time, whatever plan the statistics of
    -- the moment suggest (a scan that reads the whole backlog to sort it would make every look cost
    -- as much as the backlog is long). Each window is read with the head in one snapshot; the cursor
    -- never moves past the end of what was read.
    scanned := cur.position;
    LOOP
      SELECT ARRAY(SELECT m.position FROM mycelium.messages m
                   WHERE m.room = p_room AND m.position > scanned AND m.position <= scanned + 256
                     AND m.wakes @> ARRAY[h]
                     AND NOT EXISTS (SELECT 1 FROM mycelium.early_deliveries d
                                     WHERE d.room = p_room AND d.handle = h AND d.position = m.position)
                   ORDER BY m.position LIMIT 2),
             (SELECT last FROM mycelium.message_positions WHERE room = p_room)
        INTO pending, head;
      scanned := least(scanned + 256, greatest(coalesce(head, 0), scanned));
      IF pending[1] IS NOT NULL THEN
        -- read once, as the caller is shown it (a pending message is never an amendment: those wake
        -- nobody, so the timeline has it)
        SELECT * INTO shown FROM mycelium.timeline t WHERE t.room = p_room AND t.position = pending[1];
        hit.id := shown.id;
        hit.position := shown.position;
        hit.episode := shown.episode;
        hit.sender := shown.sender;
        settled := hit.position;
        -- the next one pending, or, when the window ended before the head, the first unread position
        next_pending := coalesce(pending[2], CASE WHEN scanned < head THEN scanned + 1 END);
        EXIT;
      END IF;
      settled := scanned;  -- nothing for the handle up to here
      EXIT WHEN scanned >= coalesce(head, 0);
    END LOOP;
  ELSE
    SELECT m.* INTO hit FROM mycelium.messages m
    WHERE m.room = p_room AND m.episode = scope AND m.position > cur.position AND m.wakes @> ARRAY[h]
      AND NOT EXISTS (SELECT 1 FROM mycelium.early_deliveries d
                      WHERE d.room = p_room AND d.handle = h AND d.position = m.position)
    ORDER BY m.position LIMIT 1;
    IF hit.id IS NOT NULL THEN
      INSERT INTO mycelium.early_deliveries (room, handle, position) VALUES (p_room, h, hit.position);
    END IF;
    SELECT (SELECT m.position FROM mycelium.messages m
            WHERE m.room = p_room AND m.position > settled AND m.wakes @> ARRAY[h]
              AND NOT EXISTS (SELECT 1 FROM mycelium.early_deliveries d
                              WHERE d.room = p_room AND d.handle = h AND d.position = m.position)
            ORDER BY m.position LIMIT 1),
           (SELECT last FROM mycelium.message_positions WHERE room = p_room)
      INTO next_pending, head;
  END IF;
  IF hit.id IS NULL THEN
    state := set_config('synchronous_commit', 'off', true);  -- (an assignment: no query to run)
  END IF;
  new_position := greatest(settled, coalesce(next_pending - 1, head, settled));
  -- For the caller, in the same statement: '<more pending> <seconds the presence lease still runs>'.
  -- A hub that knows nothing else waits for the handle, and that its presence holds, may let the
  -- handle's next await wait for a hint instead of looking first (conversations/inbox.py).
  state := set_config('mycelium.inbox_state', (next_pending IS NOT NULL)::text || ' '
                      || extract(epoch FROM present.expires_at - now())::text, true);

  IF new_position > cur.position OR hit.id IS NOT NULL THEN
    DELETE FROM mycelium.early_deliveries WHERE room = p_room AND handle = h AND position <= new_position;
    UPDATE mycelium.delivery_cursors
    SET position = new_position,
        woken_by = coalesce(hit.id, woken_by),
        woken_episode = CASE WHEN hit.id IS NULL THEN woken_episode ELSE hit.episode END,
        woken_sender = CASE WHEN hit.id IS NULL THEN woken_sender ELSE hit.sender END
    WHERE room = p_room AND handle = h;
  END IF;

  IF shown.id IS NOT NULL THEN
    RETURN NEXT shown;
  ELSIF hit.id IS NOT NULL THEN
    RETURN QUERY SELECT * FROM mycelium.timeline t WHERE t.room = p_room AND t.position = hit.position;
  END IF;
END
$$;
COMMENT ON FUNCTION mycelium.take_next(text,text,text,double precision) IS
  'await: the next message addressed to a handle, delivered exactly once, from its durable cursor.';

-- A member's reply: an exchange with payload type `reply`, through the same write gate. p_data is
-- what its markers stated (lifted by the caller), else {"action": "reply"}. It lands in p_episode
-- (NULL: the room), never implicitly in the thread that woke the replier; when it does land where
-- the waking message was, it answers that message (parent) and its sender (recipient).
CREATE OR REPLACE FUNCTION mycelium.reply(
  p_room text, p_handle text, p_text text, p_data jsonb DEFAULT NULL, p_episode text DEFAULT NULL
) RETURNS mycelium.messages LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  h text := mycelium.require_handle(p_handle);
  ep text := mycelium.episode_ref(p_room, p_episode);
  cur mycelium.delivery_cursors;
  parents uuid[] := '{}';
  recipients text[] := '{}';
BEGIN
  IF h = 'system' THEN
    PERFORM mycelium.refuse(403, 'reserved_handle', '@system is the hub itself; it does not reply',
                            jsonb_build_object('handle', h));
  END IF;
  IF p_text IS NULL OR btrim(p_text) = '' THEN
    PERFORM mycelium.refuse(422, 'empty_reply', 'a reply needs some text');
  END IF;
  PERFORM mycelium.touch_presence(p_room, h);
  SELECT * INTO cur FROM mycelium.delivery_cursors WHERE room = p_room AND handle = h;
  IF cur.woken_by IS NOT NULL AND cur.woken_episode = ep THEN
    parents := ARRAY[cur.woken_by];
    IF mycelium.normalize_handle(cur.woken_sender) <> h THEN
      recipients := ARRAY[mycelium.normalize_handle(cur.woken_sender)];
    END IF;
  END IF;
  RETURN mycelium.post_message(
    p_room, h, p_text, ep, recipients, 'exchange', NULL, 'reply',
    CASE WHEN p_data IS NULL OR p_data = '{}'::jsonb THEN '{"action": "reply"}'::jsonb ELSE p_data END,
    parents, 'agent');
END
$$;

-- Who is in a room now: every handle whose presence lease runs.
CREATE OR REPLACE FUNCTION mycelium.room_members(p_room text)
RETURNS TABLE (handle text, kind text, seen_at timestamptz, expires_at timestamptz)
LANGUAGE sql STABLE AS $$
  SELECT p.handle, 'lease', p.seen_at, p.expires_at FROM mycelium.presence p
  WHERE p.room = p_room AND p.expires_at > now()
  ORDER BY p.handle
$$;

-- ==== sql/message_search.sql ====
-- Message search: one document per readable message with every field the search grammar narrows
-- by (contracts/message-search.json), kept by the database as messages arrive: a message inserts its
-- document, an amendment rewrites its original's (newest text, edited); the timeline's after-insert
-- trigger (messages_follow_up, conversations.sql) calls index_message. Like an index, documents
-- are derived and never written by a client. The query itself is composed per request
-- (service/mycelium/conversations/search.py); the task a thread belongs to is joined at query time,
-- so a renamed task is found by its new title.

-- What a message is, for `type:`: a chat message's own type (announce, direct, broadcast, delegate,
-- event), else its payload type (reply, message, tick, ping, notice, ...).
CREATE OR REPLACE FUNCTION mycelium.message_type_of(p_payload_type text, p_payload jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT coalesce(p_payload ->> 'message_type', p_payload_type)
$$;

-- accept / reject as a message states it: the payload's lifted action first, then the last
-- stance=/action= inside a [[mycelium: …]] marker in the prose (mirrors core/markers.stance_of).
CREATE OR REPLACE FUNCTION mycelium.stance_of(p_payload jsonb, p_text text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN p_payload ->> 'action' IN ('accept', 'reject') THEN p_payload ->> 'action'
              WHEN strpos(p_text, '[[') = 0 THEN NULL ELSE (
    SELECT CASE WHEN v IN ('accept', 'agree', 'yes', 'approve') THEN 'accept' ELSE 'reject' END
    FROM (
      SELECT lower(coalesce(p[2], p[3], p[4])) AS v, i, j
      FROM regexp_matches(coalesce(p_text, ''), '\[\[\s*mycelium\s*:((?:[^\]]|\](?!\]))*)\]\]', 'gi')
             WITH ORDINALITY AS mk (b, i),
           regexp_matches(mk.b[1], '([[:alnum:]_-]+)\s*=\s*(?:"([^"]*)"|''([^'']*)''|([^\s,;]+))', 'g')
             WITH ORDINALITY AS pr (p, j)
      WHERE lower(p[1]) IN ('stance', 'action')
    ) pairs
    WHERE v IN ('accept', 'agree', 'yes', 'approve', 'reject', 'block', 'no')
    ORDER BY i DESC, j DESC LIMIT 1
  ) END
$$;

-- The `has:` values a message carries: mention, link, memory, code, scores.
CREATE OR REPLACE FUNCTION mycelium.message_has(p_text text, p_payload jsonb, p_mentions text[]) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT array_remove(ARRAY[
    CASE WHEN cardinality(p_mentions) > 0 THEN 'mention' END,
    CASE WHEN p_text ~* 'https?://' THEN 'link' END,
    CASE WHEN p_text ~ 'myc://' OR p_text ~* '\[\[(?!\s*mycelium\s*:)[^\]\[]+\]\]' THEN 'memory' END,
    CASE WHEN strpos(p_text, '`') > 0 THEN 'code' END,
    CASE WHEN jsonb_typeof(p_payload -> 'scores') = 'object' AND p_payload -> 'scores' <> '{}'::jsonb
           OR strpos(p_text, '[[') > 0 AND EXISTS (
             SELECT 1
             FROM regexp_matches(coalesce(p_text, ''), '\[\[\s*mycelium\s*:((?:[^\]]|\](?!\]))*)\]\]', 'gi') AS mk (b),
                  regexp_matches(mk.b[1], '(?:^|[^[:alnum:]_-])([A-Z])\s*=\s*([0-9]{1,3})(?=[\s,;]|$)', 'g') AS pr (p)
             WHERE p[2]::integer <= 100)
         THEN 'scores' END
  ], NULL)
$$;

-- Does a thread reference (a URN, its tail, or the prefix of a short id) name p_episode?
CREATE OR REPLACE FUNCTION mycelium.thread_matches(p_episode text, p_ref text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT p_ref <> '' AND (lower(p_episode) = p_ref
                          OR right(lower(p_episode), length(p_ref) + 1) = ':' || p_ref
                          OR starts_with(lower(mycelium.episode_short_id(p_episode)), p_ref))
$$;

-- No foreign key to rooms: every document is written by the insert of its message (whose own key
-- already holds the room until it commits), and a room's documents go with the room, by the
-- statement trigger below; a key here was one more check (a query) per message appended.
CREATE TABLE mycelium.message_search (
  room text NOT NULL,
  position bigint NOT NULL,
  id uuid NOT NULL,
  episode text NOT NULL,
  created_at timestamptz NOT NULL,
  edited_at timestamptz,
  text text NOT NULL,
  lowered text NOT NULL,
  from_handle text NOT NULL,
  to_handles text[] NOT NULL,
  mention_handles text[] NOT NULL,
  in_value text NOT NULL,
  type_value text NOT NULL,
  kind_value text,
  status_value text,
  stance text,
  step text,
  is_values text[] NOT NULL,
  has_values text[] NOT NULL,
  day text NOT NULL,
  expires_at timestamptz,
  PRIMARY KEY (room, position)
);
CREATE INDEX message_search_text ON mycelium.message_search USING gin (lowered gin_trgm_ops);
-- (no index by thread: a thread filter is thread_matches(), which no btree serves; a room's documents
-- are found by the primary key)

CREATE OR REPLACE FUNCTION mycelium.message_search_forget() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM mycelium.message_search d USING gone WHERE d.room = gone.name;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER message_search_forget AFTER DELETE ON mycelium.rooms
  REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION mycelium.message_search_forget();

-- The document of message m whose current text is p_text (edited at p_edited, if it was);
-- p_mentions: every handle the text names, loud or silent, first seen first. One SELECT in SQL, so
-- both of its users inline it: index_message, which stores it, and message_documents, which derives
-- a notice's at query time; the expressions exist once.
CREATE OR REPLACE FUNCTION mycelium.message_document(m mycelium.messages, p_text text, p_edited timestamptz,
                                          p_mentions text[]) RETURNS SETOF mycelium.message_search
LANGUAGE sql STABLE AS $$
  SELECT m.room, m.position, m.id, m.episode, m.created_at, p_edited, p_text, lower(p_text),
    mycelium.normalize_handle(m.sender),
    CASE WHEN cardinality(m.recipients) = 0 THEN '{}'::text[] ELSE
      ARRAY(SELECT DISTINCT mycelium.normalize_handle(r) FROM unnest(m.recipients) r
            WHERE mycelium.normalize_handle(r) NOT IN ('', mycelium.normalize_handle(m.sender))) END,
    p_mentions,
    CASE WHEN m.episode = mycelium.live_episode(m.room) THEN 'channel' ELSE 'thread' END,
    mycelium.message_type_of(m.payload_type, m.payload),
    coalesce(nullif(m.payload -> 'metadata' ->> 'kind', ''), nullif(m.subkind, '')),
    m.payload -> 'metadata' ->> 'status',
    -- the parsers run only on what can hold their markers (a notice or a ping has no prose)
    CASE WHEN m.payload ? 'action' OR strpos(p_text, '[[') > 0 THEN mycelium.stance_of(m.payload, p_text) END,
    lower(m.payload ->> 'step'),
    array_remove(ARRAY[CASE WHEN p_edited IS NOT NULL THEN 'edited' END,
                       CASE WHEN m.payload ? 'step' THEN 'conductor' END], NULL),
    -- message_has finds nothing in a text with no mention, no '://', no '[[' and no '`' whose payload
    -- has no scores: most messages, spared its patterns
    CASE WHEN cardinality(p_mentions) = 0 AND NOT (m.payload ? 'scores') AND strpos(p_text, '://') = 0
              AND strpos(p_text, '[[') = 0 AND strpos(p_text, '`') = 0 THEN '{}'::text[]
         ELSE mycelium.message_has(p_text, m.payload, p_mentions) END,
    (m.created_at AT TIME ZONE 'UTC')::date::text,
    CASE WHEN jsonb_typeof(m.payload -> 'metadata' -> 'ttl_seconds') = 'number'
         THEN m.created_at + make_interval(secs => (m.payload -> 'metadata' ->> 'ttl_seconds')::double precision)
    END
$$;

-- Store the document of message m (message_document's arguments). A new message's document is a
-- plain INSERT (an upsert's speculative insertion cost every message ~13 us); an amendment rewrites
-- the text-derived fields of its original's document, written when the original landed. Returns the
-- document's position, so the trigger calls it by assignment (a simple expression) rather than by
-- PERFORM (a query started per message).
CREATE OR REPLACE FUNCTION mycelium.index_message(m mycelium.messages, p_text text, p_edited timestamptz,
                                       p_mentions text[]) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
  IF p_edited IS NOT NULL THEN
    UPDATE mycelium.message_search d
    SET (edited_at, text, lowered, mention_handles, stance, is_values, has_values) = (
      SELECT n.edited_at, n.text, n.lowered, n.mention_handles, n.stance, n.is_values, n.has_values
      FROM mycelium.message_document(m, p_text, p_edited, p_mentions) n)
    WHERE d.room = m.room AND d.position = m.position;
    IF FOUND THEN
      RETURN m.position;
    END IF;
  END IF;
  INSERT INTO mycelium.message_search SELECT * FROM mycelium.message_document(m, p_text, p_edited, p_mentions);
  RETURN m.position;
END
$$;

-- A message whose document is not stored but derived (message_documents): a notice not amending
-- anything whose payload names no message_type (its type_value is then 'notice'). SQL, so inlined.
CREATE OR REPLACE FUNCTION mycelium.stored_without_document(p_payload_type text, p_payload jsonb, p_subkind text,
                                                 p_parents uuid[]) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT p_payload_type = 'notice' AND NOT p_payload ? 'message_type'
         AND NOT (coalesce(p_subkind, '') = 'amend' AND cardinality(p_parents) > 0)
$$;

-- Every handle a text names, loud or silent, each once, first seen first.
CREATE OR REPLACE FUNCTION mycelium.named_handles(p_text text) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT coalesce(array_agg(handle ORDER BY first_seen), '{}')
  FROM (SELECT handle, min(first_seen) AS first_seen FROM mycelium.mentions_in(p_text) GROUP BY handle) x
$$;

-- Every searchable message's document: the table's, and for a notice that has none, the same fields
-- derived from the timeline row at query time. A notice is prose-free board traffic (two per claim
-- and resolve, appended while the room's position lock is held) that only a search naming
-- `type:notice` looks through, so it gets no stored document (messages_follow_up skips it) unless
-- it is amended or its payload names a message_type (index_message writes one then, and that one
-- is read instead). Both kinds are message_document's; the search reads this view only when its
-- scope includes notices.
CREATE OR REPLACE VIEW mycelium.message_documents AS
SELECT * FROM mycelium.message_search
UNION ALL
SELECT d.*
FROM mycelium.messages m
CROSS JOIN LATERAL mycelium.message_document(m, m.content, NULL,
  CASE WHEN cardinality(m.mentions) + cardinality(m.silent_mentions) = 0 THEN '{}'::text[]
       ELSE mycelium.named_handles(m.content) END) d
WHERE mycelium.stored_without_document(m.payload_type, m.payload, m.subkind, m.parents)
  AND NOT EXISTS (SELECT 1 FROM mycelium.message_search s WHERE s.room = m.room AND s.position = m.position);

-- Messages written before this file was applied (a notice's document is the view's).
SELECT mycelium.index_message(m, t.text, t.edited_at, mycelium.named_handles(t.text))
FROM mycelium.timeline t JOIN mycelium.messages m ON m.room = t.room AND m.position = t.position
WHERE t.edited_at IS NOT NULL OR NOT mycelium.stored_without_document(m.payload_type, m.payload, m.subkind, m.parents);
