-- Rooms as SLIM group channels (service/mycelium/slim; the wire is contracts/slim-wire.json).
--
-- Every room is a SLIM group channel whose moderator is the hub. The database decides three things
-- about it, each here once:
--   * who publishes: one process per room, the holder of the room's session advisory lock
--     (slim_take_channel). It publishes the room's timeline by position and records, on the very
--     connection that holds the lock, the last position it published (slim_mark_published refuses
--     any other session, and a position no commit has reached). A publisher that dies loses the lock
--     with its connection; the next one resumes after the recorded position, so a message is
--     published again at most (with the same id, which receivers drop) and never skipped;
--   * who is on the channel: the members who asked to join (slim_members) and whom the room admits
--     (mycelium.room_admits, the same rule the token gate reads), so a member removed from a private
--     room leaves its channel with no second list to update;
--   * what is written: a post received on the channel goes through the verb gateway as any other.

CREATE TABLE mycelium.slim_channels (
  room text PRIMARY KEY REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  published bigint NOT NULL DEFAULT 0 CHECK (published >= 0),
  publisher text,
  published_at timestamptz
);

CREATE TABLE mycelium.slim_members (
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  handle text NOT NULL,
  joined_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, handle)
);

-- The room's advisory lock (one key space of its own: the first 8 bytes of a digest of the room).
CREATE OR REPLACE FUNCTION mycelium.slim_lock_key(p_room text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT ('x' || substr(md5('mycelium.slim:' || p_room), 1, 16))::bit(64)::bigint
$$;
COMMENT ON FUNCTION mycelium.slim_lock_key IS 'public inlined: the room''s publisher lock (pg_locks shows it)';

-- Does this session hold the room's publisher lock?
CREATE OR REPLACE FUNCTION mycelium.slim_publishing(p_room text) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT EXISTS (
    SELECT 1 FROM pg_locks
    WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted AND objsubid = 1
      AND classid = ((mycelium.slim_lock_key(p_room) >> 32) & 4294967295)::oid
      AND objid = (mycelium.slim_lock_key(p_room) & 4294967295)::oid)
$$;
COMMENT ON FUNCTION mycelium.slim_publishing IS 'public read: does this session publish the room''s channel';

-- Become the publisher of a room's channel, if nobody is: the room and the last position its
-- channel published (no row: another session publishes it, or there is no such room). The lock is
-- the session's: it lasts until slim_release_channel or the connection's end.
CREATE OR REPLACE FUNCTION mycelium.slim_take_channel(p_room text, p_publisher text)
RETURNS TABLE (room text, published bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = mycelium, public, pg_temp AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM mycelium.rooms r WHERE r.name = p_room) THEN
    RETURN;
  END IF;
  IF NOT mycelium.slim_publishing(p_room) THEN
    IF NOT pg_try_advisory_lock(mycelium.slim_lock_key(p_room)) THEN
      RETURN;
    END IF;
  END IF;
  INSERT INTO mycelium.slim_channels AS c (room, publisher) VALUES (p_room, p_publisher)
  ON CONFLICT ON CONSTRAINT slim_channels_pkey DO UPDATE SET publisher = EXCLUDED.publisher;
  RETURN QUERY SELECT c.room, c.published FROM mycelium.slim_channels c WHERE c.room = p_room;
END
$$;
COMMENT ON FUNCTION mycelium.slim_take_channel IS 'public write: take the room''s publisher lock, if free';

-- Stop publishing a room's channel (its room went, or the process stops).
CREATE OR REPLACE FUNCTION mycelium.slim_release_channel(p_room text) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = mycelium, public, pg_temp AS $$
BEGIN
  IF NOT mycelium.slim_publishing(p_room) THEN
    RETURN false;
  END IF;
  RETURN pg_advisory_unlock(mycelium.slim_lock_key(p_room));
END
$$;
COMMENT ON FUNCTION mycelium.slim_release_channel IS 'public write: give up the room''s publisher lock';

-- Record that the channel has published the room's timeline up to p_position. Only the session
-- holding the room's lock may (409 not_publisher), never beyond the last committed position (409
-- slim_ahead), and the mark never moves back.
CREATE OR REPLACE FUNCTION mycelium.slim_mark_published(p_room text, p_position bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = mycelium, public, pg_temp AS $$
DECLARE
  last_committed bigint;
  marked bigint;
BEGIN
  IF NOT mycelium.slim_publishing(p_room) THEN
    PERFORM mycelium.refuse(409, 'not_publisher',
      format('this session does not publish room %L''s channel (another does, or none has taken it)', p_room),
      jsonb_build_object('room', p_room));
  END IF;
  SELECT p.last INTO last_committed FROM mycelium.message_positions p WHERE p.room = p_room;
  IF p_position IS NULL OR p_position < 0 OR p_position > coalesce(last_committed, 0) THEN
    PERFORM mycelium.refuse(409, 'slim_ahead',
      format('room %L has no message at position %s to have published (last: %s)', p_room,
             coalesce(p_position::text, 'null'), coalesce(last_committed, 0)),
      jsonb_build_object('room', p_room, 'position', p_position, 'last', coalesce(last_committed, 0)));
  END IF;
  UPDATE mycelium.slim_channels c SET published = greatest(c.published, p_position), published_at = now()
  WHERE c.room = p_room RETURNING c.published INTO marked;
  RETURN marked;
END
$$;
COMMENT ON FUNCTION mycelium.slim_mark_published IS 'public write: record the channel''s published position';

-- Ask to be on a room's channel as p_handle: the moderator invites it. A private room admits its
-- owner and members only (403 not_a_member); behind the token gate a room the asker may not see is
-- not found, as everywhere.
CREATE OR REPLACE FUNCTION mycelium.slim_join(p_room text, p_handle text)
RETURNS TABLE (room text, handle text, joined_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = mycelium, public, pg_temp AS $$
DECLARE
  h text := mycelium.require_sender(mycelium.author(p_handle), 'handle');
  r mycelium.rooms;
  hinted text;
BEGIN
  PERFORM mycelium.require_room(p_room);
  SELECT * INTO r FROM mycelium.rooms WHERE rooms.name = p_room;
  IF NOT mycelium.room_admits(r, h) THEN
    PERFORM mycelium.refuse(403, 'not_a_member',
      format('room %L is private and @%s is not one of its members', p_room, h),
      jsonb_build_object('room', p_room, 'handle', h));
  END IF;
  hinted := mycelium.wake_hint('mycelium_slim', p_room);
  RETURN QUERY INSERT INTO mycelium.slim_members AS m (room, handle) VALUES (p_room, h)
    ON CONFLICT ON CONSTRAINT slim_members_pkey DO UPDATE SET joined_at = now()
    RETURNING m.room, m.handle, m.joined_at;
END
$$;
COMMENT ON FUNCTION mycelium.slim_join IS 'public write: ask to be on the room''s channel';

-- Leave a room's channel (true if p_handle was on it).
CREATE OR REPLACE FUNCTION mycelium.slim_leave(p_room text, p_handle text) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = mycelium, public, pg_temp AS $$
DECLARE
  h text := mycelium.require_handle(mycelium.author(p_handle), 'handle');
  hinted text;
BEGIN
  PERFORM mycelium.require_room(p_room);
  DELETE FROM mycelium.slim_members m WHERE m.room = p_room AND m.handle = h;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  hinted := mycelium.wake_hint('mycelium_slim', p_room);
  RETURN true;
END
$$;
COMMENT ON FUNCTION mycelium.slim_leave IS 'public write: leave the room''s channel';

-- Who is on a room's channel: those who joined and whom the room still admits.
CREATE OR REPLACE FUNCTION mycelium.slim_roster(p_room text)
RETURNS TABLE (room text, handle text, joined_at timestamptz)
LANGUAGE plpgsql STABLE AS $$
BEGIN
  -- (PL/pgSQL: room_admits is defined in privacy.sql, which is applied after this file)
  RETURN QUERY SELECT m.room, m.handle, m.joined_at
    FROM mycelium.slim_members m JOIN mycelium.rooms r ON r.name = m.room
    WHERE m.room = p_room AND mycelium.room_admits(r, m.handle)
    ORDER BY m.joined_at, m.handle;
END
$$;
COMMENT ON FUNCTION mycelium.slim_roster IS 'public read: who is on the room''s channel';

-- A room made, deleted, made private or given other members changes who is on which channel: the
-- publishers look again.
CREATE OR REPLACE FUNCTION mycelium.rooms_slim_hint() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE hinted text;
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.is_public IS NOT DISTINCT FROM OLD.is_public
     AND NEW.owner IS NOT DISTINCT FROM OLD.owner AND NEW.members IS NOT DISTINCT FROM OLD.members THEN
    RETURN NULL;
  END IF;
  hinted := mycelium.wake_hint('mycelium_slim', coalesce(NEW.name, OLD.name));
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER t82_rooms_slim_hint AFTER INSERT OR UPDATE OR DELETE ON mycelium.rooms
  FOR EACH ROW EXECUTE FUNCTION mycelium.rooms_slim_hint();
