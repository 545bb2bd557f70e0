-- Conversations on the timeline: who a message names and wakes, pings, amendments, the post verb.
--
-- Builds on messages.sql (the append-only table with per-room, gapless, commit-ordered positions).
--   * mentions, silent_mentions and wakes (columns of messages, messages.sql) are derived from the
--     row itself on insert, so a plain INSERT in psql gets exactly what the hub's verbs get, and
--     nobody can write them by hand;
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
COMMENT ON FUNCTION mycelium.episode_ref IS 'public read';

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
CREATE OR REPLACE TRIGGER t80_messages_follow_up AFTER INSERT ON mycelium.messages
  FOR EACH ROW EXECUTE FUNCTION mycelium.messages_follow_up();

-- ---------------------------------------------------------------------------------------------
-- Verbs.

-- Post one message. Every write passes the thread write gate (floors.sql) on insert. The sender is the
-- declared actor, else p_sender, and never a reserved handle (mycelium.require_sender: 403); sender
-- and recipients are stored normalised; p_episode may be a URN, a thread's short id, or NULL (the room).
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
  sender := mycelium.require_sender(mycelium.author(p_sender, 'sender'), 'sender');
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
COMMENT ON FUNCTION mycelium.post_message IS 'public write';

-- Amend a message: a new exchange:amend parented on the original (an amendment of an amendment
-- amends the original). Only the original sender may amend (the declared actor, else p_by, else the
-- original sender), and a reserved handle never does. Returns the original, folded.
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
  by_handle := mycelium.require_sender(coalesce(mycelium.author(p_by, 'sender_handle'), target.sender),
                                       'sender_handle');
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
COMMENT ON FUNCTION mycelium.amend_message IS 'public write';
