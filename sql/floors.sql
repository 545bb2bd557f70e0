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

-- t55: after the token gate (t50) and before t65_messages_before_insert, which allocates the
-- position and fills in the episode of a channel write, so a refused write never touches the
-- room's position counter. A write into the room's own channel (no episode, '', or the live URN:
-- every notice and ping) is open to everyone.
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
CREATE OR REPLACE TRIGGER t55_messages_admit BEFORE INSERT ON mycelium.messages
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
CREATE OR REPLACE TRIGGER t10_floors_before_write BEFORE INSERT OR UPDATE ON mycelium.floors
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
CREATE OR REPLACE TRIGGER t70_floors_after_write AFTER INSERT OR UPDATE OR DELETE ON mycelium.floors
  FOR EACH ROW EXECUTE FUNCTION mycelium.floors_after_write();

-- ---------------------------------------------------------------------------------------------
-- Verbs.

-- Hold (or re-hold) a thread's floor for p_holder, admitting p_speakers too. Re-holding replaces;
-- holding exactly the same floor again changes nothing and announces nothing. A floor that moves
-- (a flow's every step) is one UPDATE; the INSERT, whose trigger first checks that the thread
-- exists, is only for a thread's first floor (and a floor held again unchanged, which it leaves).
CREATE OR REPLACE FUNCTION mycelium.hold_floor(
  p_room text, p_episode text, p_holder text, p_speakers text[] DEFAULT '{}', p_by text DEFAULT NULL
) RETURNS mycelium.floors LANGUAGE plpgsql AS $$
DECLARE
  ep text := mycelium.episode_ref(p_room, p_episode);
  by_handle text := mycelium.author(p_by, 'by');
  who text;
  admitted text[];
  r mycelium.floors;
BEGIN
  PERFORM mycelium.require_room(p_room);
  who := mycelium.require_handle(p_holder, 'holder');
  admitted := array_remove(mycelium.handle_list(p_speakers, 'speaker'), who);
  IF by_handle IS NOT NULL THEN PERFORM set_config('mycelium.actor', by_handle, true); END IF;
  UPDATE mycelium.floors AS f
  SET holder = who, speakers = admitted, held_by = coalesce(mycelium.normalize_handle(by_handle), who)
  WHERE f.room = p_room AND f.episode = ep AND (f.holder, f.speakers) IS DISTINCT FROM (who, admitted)
  RETURNING * INTO r;
  IF FOUND THEN
    RETURN r;
  END IF;
  INSERT INTO mycelium.floors AS f (room, episode, holder, speakers, held_by)
  VALUES (p_room, ep, who, admitted, coalesce(mycelium.normalize_handle(by_handle), who))
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
COMMENT ON FUNCTION mycelium.hold_floor IS 'public write';

-- Release a thread's floor: true if one was held (and is now gone), false if there was none.
CREATE OR REPLACE FUNCTION mycelium.release_floor(p_room text, p_episode text, p_by text DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE by_handle text := mycelium.author(p_by, 'by');
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF by_handle IS NOT NULL THEN
    PERFORM set_config('mycelium.actor', mycelium.normalize_handle(by_handle), true);
  END IF;
  DELETE FROM mycelium.floors WHERE room = p_room AND episode = mycelium.episode_ref(p_room, p_episode);
  RETURN FOUND;
END
$$;
COMMENT ON FUNCTION mycelium.release_floor IS 'public write';

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
  VALUES (p_room, ep, mycelium.handle_list(p_members, 'member'),
          mycelium.require_handle(mycelium.author(p_by, 'frozen_by'), 'frozen_by'))
  ON CONFLICT (room, episode) DO UPDATE SET members = excluded.members, frozen_by = excluded.frozen_by,
                                            frozen_at = now()
  RETURNING * INTO r;
  RETURN r;
END
$$;
COMMENT ON FUNCTION mycelium.freeze_roster IS 'public write';

CREATE OR REPLACE FUNCTION mycelium.thaw_roster(p_room text, p_episode text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM mycelium.rosters WHERE room = p_room AND episode = mycelium.episode_ref(p_room, p_episode);
  RETURN FOUND;
END
$$;
COMMENT ON FUNCTION mycelium.thaw_roster IS 'public write';
