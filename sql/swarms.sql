-- Swarms: a team takes on a goal in one verb. start_swarm files the task, makes each member a
-- worker engine (unless it has a runner, which then wakes it, or is a worker already), makes sure
-- the conductor exists, and summons the conductor's `swarm` flow in the task's thread, all in one
-- transaction. The flow has the team check in and the lead split the task; the parts are filed part
-- of it naming their member (whose worker claims and works each in its thread, worker_engine.sql),
-- and when the last part is settled the lead sums them up and resolves the task, once.

CREATE TABLE mycelium.swarms (
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  key text NOT NULL,
  goal text NOT NULL CONSTRAINT swarm_has_goal CHECK (btrim(goal) <> ''),
  lead text NOT NULL,
  team text[] NOT NULL CONSTRAINT swarm_team_size CHECK (cardinality(team) BETWEEN 1 AND 32),
  conductor text NOT NULL,
  started_by uuid NOT NULL,
  created_by text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, key),
  CONSTRAINT swarm_lead_in_team CHECK (lead = team[1])
);

-- Start a swarm. p_team: the members in order (the first leads); p_title: the task's title (default:
-- the goal's first line). Refusals: 422 missing_goal, missing_team, bad_team (a duplicate, @system,
-- the conductor itself, more than 32); 409 not_a_worker (a member that is an engine of another
-- kind), not_a_conductor (p_conductor is an engine of another kind). Returns the swarm with what it
-- made of each member ('worker': registered now, 'engine': a worker already, 'runner': its runner)
-- and the message that summoned the flow.
CREATE OR REPLACE FUNCTION mycelium.start_swarm(
  p_room text, p_goal text, p_team text[], p_by text DEFAULT NULL, p_title text DEFAULT NULL,
  p_conductor text DEFAULT 'conductor'
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  by_handle text := mycelium.author(p_by, 'created_by');
  goal text := btrim(coalesce(p_goal, ''));
  title text;
  cond text := mycelium.require_handle(coalesce(nullif(btrim(p_conductor), ''), 'conductor'), 'conductor');
  team text[] := '{}';
  given text;
  h text;
  e mycelium.engines;
  members jsonb := '[]';
  what text;
  task mycelium.memories;
  posted mycelium.messages;
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF by_handle IS NULL OR btrim(by_handle) = '' THEN
    PERFORM mycelium.refuse(422, 'missing_author', 'starting a swarm names who does it (created_by)');
  END IF;
  IF goal = '' THEN
    PERFORM mycelium.refuse(422, 'missing_goal', 'goal: a swarm needs a goal (what the team is to do)',
                            '{"field": "goal"}'::jsonb);
  END IF;
  IF p_team IS NULL OR cardinality(p_team) = 0 THEN
    PERFORM mycelium.refuse(422, 'missing_team', 'team: a swarm needs at least one member (the first leads)',
                            '{"field": "team"}'::jsonb);
  END IF;
  IF cardinality(p_team) > 32 THEN
    PERFORM mycelium.refuse(422, 'bad_team', format('team: at most 32 members, not %s', cardinality(p_team)),
                            '{"field": "team"}'::jsonb);
  END IF;
  FOREACH given IN ARRAY p_team LOOP
    h := mycelium.require_handle(given, 'team');
    IF h = ANY (team) THEN
      PERFORM mycelium.refuse(422, 'bad_team', format('team: @%s is named twice', h),
                              jsonb_build_object('field', 'team', 'handle', h));
    END IF;
    IF h = 'system' OR h = cond THEN
      PERFORM mycelium.refuse(422, 'bad_team',
        format('team: @%s %s, not a member', h, CASE WHEN h = 'system' THEN 'is the hub itself' ELSE 'conducts' END),
        jsonb_build_object('field', 'team', 'handle', h));
    END IF;
    team := team || h;
  END LOOP;
  SELECT * INTO e FROM mycelium.engines WHERE room = p_room AND handle = cond;
  IF FOUND AND e.kind <> 'conductor' THEN
    PERFORM mycelium.refuse(409, 'not_a_conductor', format('@%s is a %s of room %L, not a conductor', cond, e.kind, p_room),
                            jsonb_build_object('handle', cond, 'kind', e.kind));
  ELSIF NOT FOUND THEN
    PERFORM mycelium.create_engine(p_room, cond, 'conductor', 'Walks the room''s flows.', by_handle);
  END IF;
  FOREACH h IN ARRAY team LOOP
    SELECT * INTO e FROM mycelium.engines WHERE room = p_room AND handle = h;
    IF FOUND AND e.kind <> 'worker' THEN
      PERFORM mycelium.refuse(409, 'not_a_worker',
        format('team: @%s is a %s of room %L; a swarm''s members are workers, runners or people', h, e.kind, p_room),
        jsonb_build_object('field', 'team', 'handle', h, 'kind', e.kind));
    ELSIF FOUND THEN
      what := 'engine';
    ELSIF EXISTS (SELECT 1 FROM mycelium.runners r WHERE r.room = p_room AND r.handle = h) THEN
      what := 'runner';
    ELSE
      PERFORM mycelium.create_engine(p_room, h, 'worker',
        format('A worker of the swarm on %s', left(regexp_replace(goal, '\s+', ' ', 'g'), 200)), by_handle);
      what := 'worker';
    END IF;
    members := members || jsonb_build_object('handle', h, 'as', what);
  END LOOP;
  title := coalesce(nullif(btrim(p_title), ''), left(split_part(goal, E'\n', 1), 200));
  task := mycelium.create_task(p_room, title, by_handle);
  posted := mycelium.coordinate(p_room, task.key, cond,
    format('swarm %s: %s', (SELECT string_agg('@' || m, ' ' ORDER BY o) FROM unnest(team) WITH ORDINALITY u(m, o)),
           goal), by_handle);
  INSERT INTO mycelium.swarms (room, key, goal, lead, team, conductor, started_by, created_by)
  VALUES (p_room, task.key, goal, team[1], team, cond, posted.id, mycelium.normalize_handle(by_handle));
  RETURN jsonb_build_object('room', p_room, 'key', task.key, 'title', title, 'episode', task.episode,
                            'goal', goal, 'lead', team[1], 'team', to_jsonb(team), 'members', members,
                            'conductor', cond, 'message', posted.id, 'created_by', mycelium.normalize_handle(by_handle));
END
$$;
COMMENT ON FUNCTION mycelium.start_swarm IS 'public write';

-- A room's swarms, newest first, each with where it stands: its task's status, its run (the
-- conductor's, in the task's thread), and its parts (filed, settled). With p_key, that one swarm
-- (404 swarm_not_found when there is none).
CREATE OR REPLACE FUNCTION mycelium.room_swarms(p_room text, p_key text DEFAULT NULL)
RETURNS TABLE (room text, key text, title text, goal text, lead text, team text[], conductor text,
               created_by text, created_at timestamptz, status text, run_state text, parts bigint,
               parts_settled bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
  PERFORM mycelium.require_room(p_room);
  IF p_key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM mycelium.swarms s WHERE s.room = p_room AND s.key = p_key) THEN
    PERFORM mycelium.refuse(404, 'swarm_not_found', format('no swarm on %L in room %L', p_key, p_room),
                            jsonb_build_object('room', p_room, 'key', p_key));
  END IF;
  RETURN QUERY
  SELECT s.room, s.key, mycelium.memory_title(m.value, m.meta), s.goal, s.lead, s.team, s.conductor,
         s.created_by, s.created_at,
         CASE WHEN mycelium.row_settled(m.meta, a.state) THEN coalesce(
                CASE WHEN m.meta ->> 'status' = ANY (mycelium.settled_statuses()) THEN m.meta ->> 'status' END,
                'resolved')
              WHEN m.key IS NULL THEN 'gone' ELSE coalesce(m.meta ->> 'status', 'open') END,
         (SELECT r.state FROM mycelium.engine_runs r
          WHERE r.room = s.room AND r.episode = m.episode AND r.engine = s.conductor ORDER BY r.id DESC LIMIT 1),
         (SELECT count(*) FROM mycelium.memory_links l
          WHERE l.room = s.room AND l.target = s.key AND l.kind = 'relation' AND l.relation = 'part-of'
            AND l.cross_room IS NULL),
         (SELECT count(*) FROM mycelium.memory_links l
          JOIN mycelium.memories c ON c.room = l.room AND c.key = l.source_key
          LEFT JOIN mycelium.assignments ca ON ca.room = c.room AND ca.key = c.key
          WHERE l.room = s.room AND l.target = s.key AND l.kind = 'relation' AND l.relation = 'part-of'
            AND l.cross_room IS NULL AND mycelium.row_settled(c.meta, ca.state))
  FROM mycelium.swarms s
  LEFT JOIN mycelium.memories m ON m.room = s.room AND m.key = s.key
  LEFT JOIN mycelium.assignments a ON a.room = s.room AND a.key = s.key
  WHERE s.room = p_room AND (p_key IS NULL OR s.key = p_key)
  ORDER BY s.created_at DESC, s.key;
END
$$;
COMMENT ON FUNCTION mycelium.room_swarms IS 'public read';

