-- Message search: one row per readable message with every field the search grammar narrows by
-- (contracts/message-search.json), derived in the database from the folded timeline. The query
-- itself is composed per request (service/mycelium/conversations/search.py) over this view.

-- What a message is, for `type:`: a chat message's own type (announce, direct, broadcast, delegate,
-- event), else its payload type (reply, message, tick, ping, notice, ...).
CREATE FUNCTION mycelium.message_type_of(p_payload_type text, p_payload jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT coalesce(p_payload ->> 'message_type', p_payload_type)
$$;

-- accept / reject as a message states it: the payload's lifted action first, then the last
-- stance=/action= inside a [[mycelium: …]] marker in the prose (mirrors core/markers.stance_of).
CREATE FUNCTION mycelium.stance_of(p_payload jsonb, p_text text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN p_payload ->> 'action' IN ('accept', 'reject') THEN p_payload ->> 'action' ELSE (
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
CREATE FUNCTION mycelium.message_has(p_text text, p_payload jsonb, p_mentions text[]) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT array_remove(ARRAY[
    CASE WHEN cardinality(p_mentions) > 0 THEN 'mention' END,
    CASE WHEN p_text ~* 'https?://' THEN 'link' END,
    CASE WHEN p_text ~ 'myc://' OR p_text ~* '\[\[(?!\s*mycelium\s*:)[^\]\[]+\]\]' THEN 'memory' END,
    CASE WHEN strpos(p_text, '`') > 0 THEN 'code' END,
    CASE WHEN jsonb_typeof(p_payload -> 'scores') = 'object' AND p_payload -> 'scores' <> '{}'::jsonb
           OR EXISTS (
             SELECT 1
             FROM regexp_matches(coalesce(p_text, ''), '\[\[\s*mycelium\s*:((?:[^\]]|\](?!\]))*)\]\]', 'gi') AS mk (b),
                  regexp_matches(mk.b[1], '(?:^|[^[:alnum:]_-])([A-Z])\s*=\s*([0-9]{1,3})(?=[\s,;]|$)', 'g') AS pr (p)
             WHERE p[2]::integer <= 100)
         THEN 'scores' END
  ], NULL)
$$;

-- Does a thread reference (a URN, its tail, or the prefix of a short id) name p_episode?
CREATE FUNCTION mycelium.thread_matches(p_episode text, p_ref text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT p_ref <> '' AND (lower(p_episode) = p_ref
                          OR right(lower(p_episode), length(p_ref) + 1) = ':' || p_ref
                          OR starts_with(lower(mycelium.episode_short_id(p_episode)), p_ref))
$$;

CREATE VIEW mycelium.message_search_docs AS
SELECT
  t.room, t.position, t.id, t.created_at, t.edited_at, t.episode, t.sender, t.sender_role,
  t.recipients, t.parents, t.kind, t.subkind, t.payload_type, t.payload, t.content, t.text, t.mentions,
  t.silent_mentions,
  lower(t.text) AS lowered,
  mycelium.normalize_handle(t.sender) AS from_handle,
  ARRAY(SELECT DISTINCT mycelium.normalize_handle(r) FROM unnest(t.recipients) r
        WHERE mycelium.normalize_handle(r) NOT IN ('', mycelium.normalize_handle(t.sender))) AS to_handles,
  mh.handles AS mention_handles,
  b.key AS task_key,
  b.title AS task_title,
  CASE WHEN t.episode = mycelium.live_episode(t.room) THEN 'channel' ELSE 'thread' END AS in_value,
  mycelium.message_type_of(t.payload_type, t.payload) AS type_value,
  coalesce(nullif(t.payload -> 'metadata' ->> 'kind', ''), nullif(t.subkind, '')) AS kind_value,
  t.payload -> 'metadata' ->> 'status' AS status_value,
  mycelium.stance_of(t.payload, t.text) AS stance,
  lower(t.payload ->> 'step') AS step,
  array_remove(ARRAY[CASE WHEN t.edited_at IS NOT NULL THEN 'edited' END,
                     CASE WHEN t.payload ? 'step' THEN 'conductor' END], NULL) AS is_values,
  mycelium.message_has(t.text, t.payload, mh.handles) AS has_values,
  (t.created_at AT TIME ZONE 'UTC')::date::text AS day,
  CASE WHEN jsonb_typeof(t.payload -> 'metadata' -> 'ttl_seconds') = 'number'
       THEN t.created_at + make_interval(secs => (t.payload -> 'metadata' ->> 'ttl_seconds')::double precision)
  END AS expires_at
FROM mycelium.timeline t
CROSS JOIN LATERAL (
  SELECT coalesce(array_agg(handle ORDER BY first_seen), '{}') AS handles
  FROM (SELECT handle, min(first_seen) AS first_seen FROM mycelium.mentions_in(t.text) GROUP BY handle) x
) mh
LEFT JOIN LATERAL mycelium.row_of_episode(t.room, t.episode) b ON t.episode <> mycelium.live_episode(t.room);
