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
COMMENT ON FUNCTION mycelium.message_type_of IS 'public read';

-- accept / reject as a message states it: the payload's lifted action first, then the last
-- stance=/action= word inside a [[mycelium: …]] marker in the prose that contracts/vocabulary.json's
-- stance_words knows (core/markers.stance_of reads the same map).
CREATE OR REPLACE FUNCTION mycelium.stance_of(p_payload jsonb, p_text text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN p_payload ->> 'action' IN ('accept', 'reject') THEN p_payload ->> 'action'
              WHEN strpos(p_text, '[[') = 0 THEN NULL ELSE (
    SELECT {{contract vocabulary.json stance_words}}::jsonb ->> v
    FROM (
      SELECT lower(coalesce(p[2], p[3], p[4])) AS v, i, j
      FROM regexp_matches(coalesce(p_text, ''), '\[\[\s*mycelium\s*:((?:[^\]]|\](?!\]))*)\]\]', 'gi')
             WITH ORDINALITY AS mk (b, i),
           regexp_matches(mk.b[1], '([[:alnum:]_-]+)\s*=\s*(?:"([^"]*)"|''([^'']*)''|([^\s,;]+))', 'g')
             WITH ORDINALITY AS pr (p, j)
      WHERE lower(p[1]) IN ('stance', 'action')
    ) pairs
    WHERE {{contract vocabulary.json stance_words}}::jsonb ? v
    ORDER BY i DESC, j DESC LIMIT 1
  ) END
$$;
COMMENT ON FUNCTION mycelium.stance_of IS 'public inlined';

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
COMMENT ON FUNCTION mycelium.message_has IS 'public inlined';

-- Does a thread reference (a URN, its tail, or the prefix of a short id) name p_episode?
CREATE OR REPLACE FUNCTION mycelium.thread_matches(p_episode text, p_ref text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT p_ref <> '' AND (lower(p_episode) = p_ref
                          OR right(lower(p_episode), length(p_ref) + 1) = ':' || p_ref
                          OR starts_with(lower(mycelium.episode_short_id(p_episode)), p_ref))
$$;
COMMENT ON FUNCTION mycelium.thread_matches IS 'public read';

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
CREATE OR REPLACE TRIGGER t90_message_search_forget AFTER DELETE ON mycelium.rooms
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
COMMENT ON FUNCTION mycelium.message_document IS 'public inlined';

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
COMMENT ON FUNCTION mycelium.stored_without_document IS 'public inlined';

-- Every handle a text names, loud or silent, each once, first seen first.
CREATE OR REPLACE FUNCTION mycelium.named_handles(p_text text) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT coalesce(array_agg(handle ORDER BY first_seen), '{}')
  FROM (SELECT handle, min(first_seen) AS first_seen FROM mycelium.mentions_in(p_text) GROUP BY handle) x
$$;
COMMENT ON FUNCTION mycelium.named_handles IS 'public inlined';

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
