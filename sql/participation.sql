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
CREATE OR REPLACE TRIGGER t10_delivery_cursors_forward BEFORE UPDATE ON mycelium.delivery_cursors
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
COMMENT ON FUNCTION mycelium.inbox_anchor IS 'public inlined: where a handle''s inbox starts when it is first seen';

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
  h text := mycelium.require_handle(mycelium.author(p_handle));
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
COMMENT ON FUNCTION mycelium.take_next IS
  'public write: await: the next message addressed to a handle, delivered exactly once, from its durable cursor.';

-- A member's reply: an exchange with payload type `reply`, through the same write gate. p_data is
-- what its markers stated (lifted by the caller), else {"action": "reply"}. It lands in p_episode
-- (NULL: the room), never implicitly in the thread that woke the replier; when it does land where
-- the waking message was, it answers that message (parent) and its sender (recipient). The replier
-- is the declared actor, else p_handle, and never a reserved handle (403).
CREATE OR REPLACE FUNCTION mycelium.reply(
  p_room text, p_handle text, p_text text, p_data jsonb DEFAULT NULL, p_episode text DEFAULT NULL
) RETURNS mycelium.messages LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  h text := mycelium.require_sender(mycelium.author(p_handle), 'handle');
  ep text := mycelium.episode_ref(p_room, p_episode);
  cur mycelium.delivery_cursors;
  parents uuid[] := '{}';
  recipients text[] := '{}';
BEGIN
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
COMMENT ON FUNCTION mycelium.reply IS 'public write';

-- Who is in a room now: every handle whose presence lease runs.
CREATE OR REPLACE FUNCTION mycelium.room_members(p_room text)
RETURNS TABLE (handle text, kind text, seen_at timestamptz, expires_at timestamptz)
LANGUAGE sql STABLE AS $$
  SELECT p.handle, 'lease', p.seen_at, p.expires_at FROM mycelium.presence p
  WHERE p.room = p_room AND p.expires_at > now()
  ORDER BY p.handle
$$;
COMMENT ON FUNCTION mycelium.room_members IS 'public read';
