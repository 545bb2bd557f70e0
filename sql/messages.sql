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
COMMENT ON FUNCTION mycelium.live_episode IS 'public inlined';

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
  -- who the message names and wakes (conversations.sql): derived from the row itself, never from
  -- the writer. The write gate's BEFORE INSERT trigger (messages_admit, floors.sql) sets all three
  -- on every insert, overwriting whatever an INSERT gave, so a plain INSERT in psql gets exactly
  -- what the hub's verbs get and nobody can forge a wake (the table is append-only: an insert is
  -- the only moment they are set). Not STORED generated columns: those expressions are set up again
  -- for every INSERT statement, where the trigger's PL/pgSQL is compiled once per session and
  -- parses nothing for a row with no prose and no recipients (a notice, a ping).
  mentions text[] NOT NULL DEFAULT '{}',
  silent_mentions text[] NOT NULL DEFAULT '{}',
  wakes text[] NOT NULL DEFAULT '{}',
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
CREATE OR REPLACE TRIGGER t65_messages_before_insert BEFORE INSERT ON mycelium.messages
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
CREATE OR REPLACE TRIGGER t75_messages_after_insert AFTER INSERT ON mycelium.messages
  FOR EACH ROW EXECUTE FUNCTION mycelium.messages_after_insert();

CREATE OR REPLACE TRIGGER t52_messages_append_only BEFORE UPDATE OR DELETE ON mycelium.messages
  FOR EACH ROW EXECUTE FUNCTION mycelium.refuse_history_change();
CREATE OR REPLACE TRIGGER t05_messages_no_truncate BEFORE TRUNCATE ON mycelium.messages
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
