-- The wake digest: what an agent woken by a message needs beside it to take its turn without
-- reading the whole room (hub.md §10b), as one read of the database's state:
--   * why it woke: an engine's turn addressed to it (the flow, step and turn), a mention, a message
--     addressed to it, or one in a thread it is part of;
--   * where: the thread, and the board row it belongs to;
--   * what changed since its last turn (its previous message in the room): the board's notices,
--     floor moves and upstream states left out, newest last, the rest counted;
--   * its tasks (assigned to it or held by it, not settled) and the board's open rows;
--   * the messages that asked for it since its last turn, besides this one (cut, the rest counted);
--   * how many more messages wait for it (so it awaits first), and where to reply.
-- mycelium.conversations.digest renders it as text.

CREATE OR REPLACE FUNCTION mycelium.wake_digest(p_room text, p_handle text, p_message uuid)
RETURNS jsonb LANGUAGE sql STABLE AS $$
  WITH me AS (
    SELECT mycelium.normalize_handle(p_handle) AS h
  ), msg AS (
    SELECT t.* FROM mycelium.timeline t WHERE t.room = p_room AND t.id = p_message
  ), last_turn AS (
    -- the handle's previous message in the room (bounded: a handle that never spoke scans no further)
    SELECT max(m.position) AS position
    FROM mycelium.messages m, msg, me
    WHERE m.room = p_room AND m.position < msg.position AND m.position > msg.position - 5000
      AND mycelium.normalize_handle(m.sender) = me.h AND m.payload_type NOT IN ('ping', 'presence', 'keepalive')
  ), since AS (
    -- what is looked back at: from the last turn, or as far as the same bound reaches
    SELECT coalesce(l.position, greatest(msg.position - 5000, 0)) AS position, l.position IS NOT NULL AS spoke
    FROM last_turn l, msg
  ), thread AS (
    SELECT msg.episode, r.key, r.title, msg.episode = mycelium.live_episode(p_room) AS live
    FROM msg LEFT JOIN LATERAL mycelium.row_of_episode(p_room, msg.episode) r ON true
  ), changes AS (
    SELECT m.position, m.payload ->> 'subkind' AS subkind, m.payload ->> 'key' AS key,
           coalesce(m.payload ->> 'by', m.payload ->> 'owner') AS by, m.payload ->> 'title' AS title
    FROM mycelium.messages m, msg, since
    WHERE m.room = p_room AND m.position > since.position AND m.position < msg.position
      AND m.payload_type = 'notice' AND coalesce(m.payload ->> 'subkind', '') NOT IN ('floor', 'upstream')
  ), asked AS (
    SELECT t.position, mycelium.normalize_handle(t.sender) AS sender, t.episode, t.text
    FROM mycelium.timeline t, msg, since, me
    WHERE t.room = p_room AND t.position > since.position AND t.position < msg.position
      AND t.wakes @> ARRAY[me.h]
  ), board AS (
    SELECT b.key, b.title, b.status, b.assignee, b.owner, b.attention, b.updated_at
    FROM mycelium.board_rows b WHERE b.room = p_room AND b.attention <> 'resolved'
  ), waiting AS (
    SELECT count(*) AS n
    FROM mycelium.messages m, me, mycelium.delivery_cursors c
    WHERE c.room = p_room AND c.handle = me.h AND m.room = p_room AND m.position > c.position
      AND m.id <> p_message AND m.wakes @> ARRAY[me.h]
      AND NOT EXISTS (SELECT 1 FROM mycelium.early_deliveries d
                      WHERE d.room = p_room AND d.handle = me.h AND d.position = m.position)
  )
  SELECT jsonb_build_object(
    'handle', me.h,
    'why', CASE
      WHEN msg.payload #>> '{conductor,event}' = 'turn' AND me.h = ANY (msg.recipients) THEN 'turn'
      WHEN me.h = ANY (msg.mentions) THEN 'mention'
      WHEN me.h = ANY (msg.recipients) THEN 'addressed'
      ELSE 'message' END,
    'from', mycelium.normalize_handle(msg.sender),
    'turn', CASE WHEN msg.payload #>> '{conductor,event}' = 'turn' THEN
      jsonb_strip_nulls(jsonb_build_object('flow', msg.payload #>> '{conductor,protocol}',
        'step', msg.payload #>> '{conductor,step}', 'turn', msg.payload #> '{conductor,turn}',
        'cap', msg.payload #> '{conductor,cap}', 'to', msg.payload #> '{conductor,to}')) END,
    'thread', (SELECT jsonb_build_object('episode', t.episode, 'short_id', mycelium.episode_short_id(t.episode),
                                         'live', t.live, 'key', t.key, 'title', t.title) FROM thread t),
    'since', CASE WHEN since.spoke THEN since.position END,
    'changes', coalesce((SELECT jsonb_agg(to_jsonb(c) ORDER BY c.position)
                         FROM (SELECT * FROM changes ORDER BY position DESC LIMIT 8) c), '[]'),
    'changes_more', greatest((SELECT count(*) FROM changes) - 8, 0),
    'tasks', coalesce((SELECT jsonb_agg(jsonb_build_object('key', b.key, 'title', b.title, 'status', b.status,
                                                           'holding', coalesce(b.owner = me.h, false)) ORDER BY b.key)
                       FROM board b WHERE b.assignee = me.h OR b.owner = me.h), '[]'),
    'board', coalesce((SELECT jsonb_agg(jsonb_build_object('key', b.key, 'title', b.title, 'status', b.status,
                                                           'assignee', b.assignee, 'owner', b.owner,
                                                           'attention', b.attention) ORDER BY b.updated_at DESC)
                       FROM (SELECT * FROM board ORDER BY updated_at DESC LIMIT 8) b), '[]'),
    'board_more', greatest((SELECT count(*) FROM board) - 8, 0),
    'asked', coalesce((SELECT jsonb_agg(jsonb_build_object('position', a.position, 'sender', a.sender,
                                                           'here', a.episode = msg.episode,
                                                           'text', CASE WHEN length(a.text) > 240
                                                                        THEN left(a.text, 239) || '…' ELSE a.text END)
                                        ORDER BY a.position)
                       FROM (SELECT * FROM asked ORDER BY position DESC LIMIT 3) a), '[]'),
    'asked_more', greatest((SELECT count(*) FROM asked) - 3, 0),
    'waiting', coalesce((SELECT n FROM waiting), 0)
  )
  FROM msg, me, since
$$;
COMMENT ON FUNCTION mycelium.wake_digest IS
  'public read: What a handle woken by a message needs beside it: why, what changed since its last turn, its tasks, the board, who asked.';
