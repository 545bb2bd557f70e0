-- The synthesizer (mycelium.engines.synthesizer): what one of its summons distils. The room's prose
-- is read here for the engine answering the summon, and for nobody else (held_summon: the worker
-- holding the summon, acting as that engine), so behind the token gate the synthesizer reads the
-- private room it was summoned in while no other caller reads a room through it.

-- The synthesis so far and the transcript after its cursor, for summon p_summon held by p_worker:
-- {version (NULL: none yet), text, after (the cursor: the last position read, from the memory's
-- frontmatter; 0 with p_all or none), messages: [{position, sender, text}]}. The messages are the
-- room's prose (messages and replies, every thread, amendments folded in) after the cursor up to
-- the summon, without the synthesizer's own posts nor the messages that summon it; p_limit at most.
CREATE OR REPLACE FUNCTION mycelium.synthesis_input(
  p_room text, p_summon bigint, p_worker text, p_all boolean, p_limit integer
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  s mycelium.engine_summons := mycelium.held_summon(p_room, p_summon, p_worker);
  m mycelium.memories;
  after bigint := 0;
BEGIN
  IF s.kind <> 'synthesizer' THEN
    PERFORM mycelium.refuse(422, 'not_a_synthesizer', format('@%s is a %s, not a synthesizer', s.engine, s.kind));
  END IF;
  SELECT * INTO m FROM mycelium.memories WHERE room = p_room AND key = 'context/synthesis';
  IF FOUND AND NOT coalesce(p_all, false) AND jsonb_typeof(m.meta -> 'cursor') = 'number'
     AND (m.meta ->> 'cursor') ~ '^\d+$' THEN
    after := (m.meta ->> 'cursor')::bigint;
  END IF;
  RETURN jsonb_build_object(
    'version', m.version,
    'text', CASE WHEN coalesce(p_all, false) THEN NULL ELSE m.value ->> 'text' END,
    'after', after,
    'messages', coalesce((
      SELECT jsonb_agg(jsonb_build_object('position', t.position, 'sender', t.sender, 'text', t.text)
                       ORDER BY t.position)
      FROM (SELECT x.position, mycelium.normalize_handle(x.sender) AS sender, x.text
            FROM mycelium.timeline x
            WHERE x.room = p_room AND x.position > after AND x.position <= s.position
              AND x.kind IN ('intent', 'exchange', 'commit') AND x.payload_type IN ('message', 'reply')
              AND x.sender <> 'system' AND mycelium.normalize_handle(x.sender) <> s.engine
              AND NOT (s.engine = ANY (x.mentions))
            ORDER BY x.position LIMIT greatest(coalesce(p_limit, 0), 0)) t), '[]'));
END
$$;
COMMENT ON FUNCTION mycelium.synthesis_input IS 'public read';
