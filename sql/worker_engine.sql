-- The worker engine: a room member played by an agent command (service/mycelium/workers/
-- worker_turns.py runs it, one turn per summon, in the member's own git worktree). This file decides
-- what wakes a worker and what a turn's answer does to the board.
--
--   * A worker is summoned like a persona (a text @-mention, a message addressed to it) and by two
--     board notices: `filed` naming it as the assignee (how 'filed': it claims the row and works it
--     in the row's thread) and the `resolved` notice of the last unsettled part of a parent (how
--     'completed': the parent's combiner sums the parts up and resolves the parent). The completion
--     is decided under the parent's row lock, so of two parts resolved at once exactly one sees the
--     others settled; a unique index keeps it to one summon per parent, ever.
--   * A turn's answer is applied by worker_turn in one transaction with the summon's close: the
--     reply, the rows its `[[new: title -> @member]]` lines file (part of the turn's row), the
--     `[[done]]` that resolves it. A worker killed mid-turn applied nothing; its summon's lease runs
--     out and another worker takes the turn again. A turn applied is never applied again (the
--     summon is closed by it).

-- Who sums up a parent whose parts are all settled: the lead of the swarm the parent is the task of;
-- else the one worker that filed all its parts; else the parent's assignee, if a worker. NULL: no
-- engine does (a person resolves it).
CREATE OR REPLACE FUNCTION mycelium.parent_combiner(p_room text, p_parent text) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT coalesce(
    (SELECT s.lead FROM mycelium.swarms s
     JOIN mycelium.engines e ON e.room = s.room AND e.handle = s.lead AND e.kind = 'worker'
     WHERE s.room = p_room AND s.key = p_parent),
    (SELECT min(c.created_by) FROM mycelium.memory_links l
     JOIN mycelium.memories c ON c.room = l.room AND c.key = l.source_key
     JOIN mycelium.engines e ON e.room = c.room AND e.handle = c.created_by AND e.kind = 'worker'
     WHERE l.room = p_room AND l.target = p_parent AND l.kind = 'relation' AND l.relation = 'part-of'
       AND l.cross_room IS NULL
     HAVING count(DISTINCT c.created_by) = 1
        AND count(*) = (SELECT count(*) FROM mycelium.memory_links x
                        WHERE x.room = p_room AND x.target = p_parent AND x.kind = 'relation'
                          AND x.relation = 'part-of' AND x.cross_room IS NULL)),
    (SELECT e.handle FROM mycelium.memories p
     JOIN mycelium.engines e ON e.room = p.room AND e.handle = mycelium.normalize_handle(p.meta ->> 'assignee')
                            AND e.kind = 'worker'
     WHERE p.room = p_room AND p.key = p_parent))
$$;
COMMENT ON FUNCTION mycelium.parent_combiner IS 'public read';

-- The parts of a parent row (its part-of backlinks) that are not settled.
CREATE OR REPLACE FUNCTION mycelium.unsettled_parts(p_room text, p_parent text) RETURNS bigint
LANGUAGE sql STABLE AS $$
  SELECT count(*) FROM mycelium.memory_links l
  JOIN mycelium.memories c ON c.room = l.room AND c.key = l.source_key
  LEFT JOIN mycelium.assignments a ON a.room = c.room AND a.key = c.key
  WHERE l.room = p_room AND l.target = p_parent AND l.kind = 'relation' AND l.relation = 'part-of'
    AND l.cross_room IS NULL AND NOT mycelium.row_settled(c.meta, a.state)
$$;

-- The summons a board notice makes (called by messages_summon_engines, in the notice's transaction).
-- (The notice's room, id, position and payload, not its row: no function depends on the table's type.)
CREATE OR REPLACE FUNCTION mycelium.summon_workers_by_notice(p_room text, p_id uuid, p_position bigint, p_payload jsonb)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  sub text := p_payload ->> 'subkind';
  k text := p_payload ->> 'key';
  parent mycelium.memories;
  lease_state text;
  combiner text;
  hinted text;
BEGIN
  IF sub NOT IN ('filed', 'resolved') OR k IS NULL
     OR NOT EXISTS (SELECT 1 FROM mycelium.engines e WHERE e.room = p_room AND e.kind = 'worker') THEN
    RETURN;
  END IF;
  IF sub = 'filed' THEN
    IF nullif(btrim(p_payload ->> 'assignee'), '') IS NULL THEN
      RETURN;
    END IF;
    INSERT INTO mycelium.engine_summons (room, engine, kind, message_id, position, episode, sender, content,
                                         how, row_key)
    SELECT p_room, e.handle, e.kind, p_id, p_position, p_payload ->> 'episode',
           mycelium.normalize_handle(coalesce(p_payload ->> 'by', 'system')), coalesce(p_payload ->> 'title', k),
           'filed', k
    FROM mycelium.engines e
    WHERE e.room = p_room AND e.kind = 'worker' AND e.handle = mycelium.normalize_handle(p_payload ->> 'assignee')
    ON CONFLICT DO NOTHING;
  ELSE
    SELECT p.* INTO parent FROM mycelium.memories c
    JOIN mycelium.memories p ON p.room = c.room AND p.key = c.meta ->> 'part-of'
    WHERE c.room = p_room AND c.key = k;
    IF parent.key IS NULL THEN
      RETURN;
    END IF;
    -- under the parent's lock: of parts resolved at once, the last to commit sees the others settled
    -- (their notices also queue on the room's position, t65; this lock does not lean on that)
    PERFORM 1 FROM mycelium.memories WHERE room = p_room AND key = parent.key FOR NO KEY UPDATE;
    SELECT a.state INTO lease_state FROM mycelium.assignments a WHERE a.room = p_room AND a.key = parent.key;
    SELECT x.meta INTO parent.meta FROM mycelium.memories x WHERE x.room = p_room AND x.key = parent.key;
    IF mycelium.row_settled(parent.meta, lease_state) OR mycelium.unsettled_parts(p_room, parent.key) > 0 THEN
      RETURN;
    END IF;
    combiner := mycelium.parent_combiner(p_room, parent.key);
    IF combiner IS NULL THEN
      RETURN;
    END IF;
    INSERT INTO mycelium.engine_summons (room, engine, kind, message_id, position, episode, sender, content,
                                         how, row_key)
    VALUES (p_room, combiner, 'worker', p_id, p_position, parent.episode,
            mycelium.normalize_handle(coalesce(p_payload ->> 'by', 'system')),
            mycelium.memory_title(parent.value, parent.meta), 'completed', parent.key)
    ON CONFLICT DO NOTHING;
  END IF;
  IF FOUND THEN
    hinted := mycelium.wake_hint('mycelium_engines', p_room);
  END IF;
END
$$;

-- What a worker's turn is given: the row it is about (key, title, text, status, holder, parent,
-- whether settled), its parts (for a completion: each part's title, status, holder and the last
-- thing said in its thread), the swarm's team when the row (or its parent) is a swarm's task, the
-- thread's latest messages (oldest first), how many turns the worker took in the room, and the
-- workers.* settings in force there (timeout_seconds, max_turns_per_room, tools).
CREATE OR REPLACE FUNCTION mycelium.worker_context(p_room text, p_id bigint, p_limit integer DEFAULT 20)
RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
  s mycelium.engine_summons;
  k text;
  r mycelium.memories;
  a mycelium.assignments;
  swarm mycelium.swarms;
BEGIN
  SELECT * INTO s FROM mycelium.engine_summons WHERE room = p_room AND id = p_id;
  IF NOT FOUND THEN
    PERFORM mycelium.refuse(404, 'summon_not_found', format('no summon %s in room %L', p_id, p_room));
  END IF;
  k := coalesce(s.row_key, (SELECT b.key FROM mycelium.row_of_episode(p_room, s.episode) b WHERE b.board));
  SELECT * INTO r FROM mycelium.memories WHERE room = p_room AND key = k;
  SELECT * INTO a FROM mycelium.assignments WHERE room = p_room AND key = k;
  SELECT * INTO swarm FROM mycelium.swarms x
  WHERE x.room = p_room AND x.key IN (k, r.meta ->> 'part-of') ORDER BY x.key = k DESC LIMIT 1;
  RETURN jsonb_build_object(
    'summon', to_jsonb(s),
    'settings', (SELECT jsonb_object_agg(substr(x.name, 9), x.value) FROM mycelium.settings_of(p_room) x
                 WHERE x.name LIKE 'workers.%'),
    'turns_taken', (SELECT count(*) FROM mycelium.engine_summons x
                    WHERE x.room = p_room AND x.engine = s.engine AND x.state = 'done' AND x.outcome = 'answered'),
    'row', CASE WHEN r.key IS NOT NULL THEN jsonb_build_object(
      'key', r.key, 'title', mycelium.memory_title(r.value, r.meta), 'text', coalesce(r.value ->> 'text', r.value #>> '{}'),
      'status', r.meta ->> 'status', 'assignee', r.meta ->> 'assignee', 'part_of', r.meta ->> 'part-of',
      'holder', CASE WHEN mycelium.task_lease_live(a) THEN a.owner END,
      'settled', mycelium.row_settled(r.meta, a.state)) END,
    'parts', coalesce((
      SELECT jsonb_agg(jsonb_build_object(
               'key', c.key, 'title', mycelium.memory_title(c.value, c.meta),
               'settled', mycelium.row_settled(c.meta, ca.state), 'by', ca.note_by,
               'last', (SELECT jsonb_build_object('sender', x.sender, 'content', left(x.content, 2000))
                        FROM mycelium.messages x
                        WHERE x.room = p_room AND x.episode = c.episode AND x.payload_type IN ('message', 'reply')
                        ORDER BY x.position DESC LIMIT 1))
             ORDER BY c.key)
      FROM mycelium.memory_links l
      JOIN mycelium.memories c ON c.room = l.room AND c.key = l.source_key
      LEFT JOIN mycelium.assignments ca ON ca.room = c.room AND ca.key = c.key
      WHERE l.room = p_room AND l.target = k AND l.kind = 'relation' AND l.relation = 'part-of'
        AND l.cross_room IS NULL), '[]'),
    'team', CASE WHEN swarm.key IS NOT NULL THEN to_jsonb(swarm.team) END,
    'lead', swarm.lead,
    'thread', coalesce((
      SELECT jsonb_agg(jsonb_build_object('sender', t.sender, 'content', t.content) ORDER BY t.position)
      FROM (SELECT x.sender, left(x.content, 4000) AS content, x.position FROM mycelium.messages x
            WHERE x.room = p_room AND x.episode = s.episode AND x.payload_type IN ('message', 'reply')
              AND x.position <= s.position
            ORDER BY x.position DESC LIMIT greatest(p_limit, 0)) t), '[]'));
END
$$;
COMMENT ON FUNCTION mycelium.worker_context IS 'public read';

-- Apply a worker's turn and close its summon, in one transaction. p_content is the reply (its action
-- lines taken out), p_tasks the rows its `[[new: …]]` lines file ([{title, assignee}]), p_done whether
-- it said `[[done]]`, p_mentions the handles its reply names. The reply goes to the thread the
-- summon came from, addressed to the handles it names (not the worker itself); a reply on a row
-- someone else holds that neither resolves it nor names anyone is addressed to the holder (handed
-- back). Board actions are the worker's own only: in a turn a conductor's run asked for, the lines
-- are the run's to collect, and nothing is applied here. New rows are part of the turn's row (loose
-- when the thread has none); `done` resolves the turn's row unless it is settled (then nothing
-- changes); a completion turn resolves its parent. A reply the floor does not admit applies nothing
-- (the summon closes as not_admitted).
CREATE OR REPLACE FUNCTION mycelium.worker_turn(
  p_room text, p_id bigint, p_worker text, p_content text, p_tasks jsonb DEFAULT '[]', p_done boolean DEFAULT false,
  p_mentions text[] DEFAULT '{}', p_payload jsonb DEFAULT '{}'
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  s mycelium.engine_summons := mycelium.held_summon(p_room, p_id, p_worker);
  k text;
  r mycelium.memories;
  a mycelium.assignments;
  own boolean;
  named text[] := '{}';
  given text;
  recipients text[];
  handed_back boolean := false;
  posted mycelium.messages;
  v_outcome text := 'answered';
  filed jsonb := '[]';
  resolved text;
  t jsonb;
  written mycelium.memories;
BEGIN
  IF s.kind <> 'worker' THEN
    PERFORM mycelium.refuse(422, 'not_a_worker', format('@%s is a %s, not a worker', s.engine, s.kind));
  END IF;
  k := coalesce(s.row_key, (SELECT b.key FROM mycelium.row_of_episode(p_room, s.episode) b WHERE b.board));
  IF k IS NOT NULL THEN
    SELECT * INTO r FROM mycelium.memories WHERE room = p_room AND key = k FOR NO KEY UPDATE;
    SELECT * INTO a FROM mycelium.assignments WHERE room = p_room AND key = k;
  END IF;
  own := NOT EXISTS (SELECT 1 FROM mycelium.engines e WHERE e.room = p_room AND e.handle = s.sender
                     AND e.kind = 'conductor') OR s.how IN ('filed', 'completed');
  FOREACH given IN ARRAY coalesce(p_mentions, '{}') LOOP
    given := mycelium.normalize_handle(given);
    IF given <> s.engine AND given <> 'system' AND NOT given = ANY (named) THEN
      named := named || given;
    END IF;
  END LOOP;
  -- (a run's turn is answered to the run: it addresses whom it will next)
  recipients := CASE WHEN own THEN named ELSE '{}' END;
  IF own AND r.key IS NOT NULL AND cardinality(named) = 0 AND NOT coalesce(p_done, false)
     AND s.how NOT IN ('filed', 'completed') AND mycelium.task_lease_live(a) AND a.owner <> s.engine THEN
    recipients := ARRAY[a.owner];
    handed_back := true;
  END IF;
  BEGIN
    posted := mycelium.post_message(p_room, s.engine, coalesce(nullif(btrim(p_content), ''), '(no words)'),
      s.episode, recipients, 'exchange', NULL, 'reply',
      coalesce(p_payload, '{}') || jsonb_build_object('action', 'reply', 'worker', jsonb_build_object(
        'wake', s.how, 'row', k, 'handed_back', handed_back)),
      ARRAY[s.message_id], 'agent');
  EXCEPTION WHEN SQLSTATE 'MY409' OR SQLSTATE 'MY403' THEN
    v_outcome := 'not_admitted';
  END;
  IF v_outcome = 'answered' AND own THEN
    FOR t IN SELECT * FROM jsonb_array_elements(coalesce(p_tasks, '[]')) LOOP
      written := mycelium.create_task(p_room, t ->> 'title', s.engine, NULL, t ->> 'assignee',
                                      CASE WHEN r.key IS NOT NULL THEN k END);
      filed := filed || jsonb_build_object('key', written.key, 'title', t ->> 'title', 'assignee', t ->> 'assignee');
    END LOOP;
    IF r.key IS NOT NULL AND (coalesce(p_done, false) OR s.how = 'completed')
       AND mycelium.is_assignable_key(k) AND NOT mycelium.row_settled(r.meta, a.state) THEN
      PERFORM mycelium.resolve_task(p_room, k, s.engine);
      resolved := k;
    END IF;
  END IF;
  UPDATE mycelium.engine_summons
  SET state = 'done', outcome = v_outcome, answer_id = posted.id, done_at = now(), taken_until = NULL
  WHERE room = p_room AND id = p_id
  RETURNING * INTO s;
  RETURN jsonb_build_object('summon', to_jsonb(s), 'message', posted.id, 'row', k, 'filed', filed,
                            'resolved', resolved, 'recipients', to_jsonb(recipients), 'handed_back', handed_back);
END
$$;
COMMENT ON FUNCTION mycelium.worker_turn IS 'public write';

-- The turn a worker will not take: the room's turns are used up, or the row it was filed for is
-- held by someone else. Closed as refused with the reason said in the thread (unless not admitted).
CREATE OR REPLACE FUNCTION mycelium.worker_declined(p_room text, p_id bigint, p_worker text, p_reason text)
RETURNS mycelium.engine_summons LANGUAGE plpgsql AS $$
BEGIN
  RETURN mycelium.answer_summon(p_room, p_id, p_worker, p_reason,
                                jsonb_build_object('action', 'reply', 'worker', jsonb_build_object('declined', true)),
                                'refused', p_reason);
END
$$;
COMMENT ON FUNCTION mycelium.worker_declined IS 'public write';
