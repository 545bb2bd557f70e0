-- Negotiations: the aligner's runs (mycelium.engines.aligner). A negotiation is an engine run of
-- kind 'aligner', moved by the same workers, leases and compare-and-swap steps as a conductor's run
-- (engines.sql); its trace is the move log a fresh worker replays into a new NEGMAS mechanism.
--
--   * start_negotiation: the run (started as any run: one per thread, the floor held by the engine,
--     the opening post, the summon closed) and the thread's roster frozen on its members, in one
--     transaction: from then on an outsider's write into the thread is refused (403 not_in_roster,
--     from HTTP and psql alike), and a member not addressed by the current turn is refused by the
--     floor (409). engine_step thaws the roster when the run closes.
--   * a membership change makes the run due at once and moves its seq (a step computed before the
--     change is refused, 409 step_moved, so nothing is lost to a race): a member who left the room
--     (no longer among the members of a room it was a member of when the run started), or the
--     roster frozen again on other members, or thawed, by anyone but the engine.
--     negotiation_departure says who left; the aligner then closes the run as rejected with it.
--   * a negotiation that found nothing to negotiate (its issues recorded as none) ends with its
--     explanation and leaves no episode: run_leaves_episode (sql/runs.sql), which engine_step
--     asks on close and mycelium.episodes filters on.

CREATE OR REPLACE FUNCTION mycelium.start_negotiation(
  p_room text, p_summon bigint, p_worker text, p_flow jsonb, p_open jsonb, p_lease_seconds double precision
) RETURNS mycelium.engine_runs LANGUAGE plpgsql AS $$
DECLARE
  kind text;
  cast_ text[];
  r mycelium.engine_runs;
BEGIN
  SELECT s.kind INTO kind FROM mycelium.engine_summons s WHERE s.room = p_room AND s.id = p_summon;
  IF kind IS DISTINCT FROM 'aligner' THEN
    PERFORM mycelium.refuse(422, 'not_an_aligner', format('summon %s is not an aligner''s', p_summon));
  END IF;
  cast_ := mycelium.handle_list(ARRAY(SELECT jsonb_array_elements_text(coalesce(p_flow -> 'cast', '[]'))), 'member');
  IF cardinality(cast_) < 2 THEN
    PERFORM mycelium.refuse(422, 'too_few_participants',
      'A negotiation needs at least two agents: name them, e.g. `@aligner @alice @bob: the price and the vendor`',
      jsonb_build_object('cast', to_jsonb(cast_)));
  END IF;
  -- the members who are members of the room now (its owner among them): leaving it aborts the run
  r := mycelium.start_engine_run(p_room, p_summon, p_worker, 'negotiate',
         p_flow || jsonb_build_object('cast', to_jsonb(cast_), 'enrolled', to_jsonb(ARRAY(
           SELECT h FROM unnest(cast_) WITH ORDINALITY AS c (h, i), mycelium.rooms ro
           WHERE ro.name = p_room AND (h = mycelium.normalize_handle(ro.owner)
                                       OR h = ANY (ARRAY(SELECT mycelium.normalize_handle(m) FROM unnest(ro.members) m)))
           ORDER BY i))),
         p_open, p_lease_seconds);
  UPDATE mycelium.engine_runs SET kind = 'aligner' WHERE room = p_room AND id = r.id RETURNING * INTO r;
  PERFORM mycelium.freeze_roster(p_room, r.episode, cast_, r.engine);
  RETURN r;
END
$$;
COMMENT ON FUNCTION mycelium.start_negotiation IS 'public write';

-- Who left a negotiation that is still open, in words (NULL while every member is still in): a member
-- no longer among the members of a room it was a member of when the run started; the thread's
-- roster thawed, or frozen again (by someone else, or on other members).
CREATE OR REPLACE FUNCTION mycelium.negotiation_departure(p_room text, p_run bigint) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
  r mycelium.engine_runs;
  ro mycelium.rosters;
  cast_ text[];
  now_in text[];
  said text[] := '{}';
  gone text[];
BEGIN
  SELECT * INTO r FROM mycelium.engine_runs WHERE room = p_room AND id = p_run;
  IF r.room IS NULL OR r.kind <> 'aligner' OR r.state <> 'open' THEN
    RETURN NULL;
  END IF;
  cast_ := ARRAY(SELECT jsonb_array_elements_text(coalesce(r.flow -> 'cast', '[]')));
  SELECT array_remove(ARRAY(SELECT mycelium.normalize_handle(m) FROM unnest(x.members) m)
                      || mycelium.normalize_handle(x.owner), NULL)
    INTO now_in FROM mycelium.rooms x WHERE x.name = p_room;
  gone := ARRAY(SELECT h FROM jsonb_array_elements_text(coalesce(r.flow -> 'enrolled', '[]')) h
                WHERE NOT h = ANY (coalesce(now_in, '{}')));
  IF cardinality(gone) > 0 THEN
    said := said || format('%s left the room', (SELECT string_agg('@' || h, ', ') FROM unnest(gone) h));
  END IF;
  SELECT * INTO ro FROM mycelium.rosters WHERE room = r.room AND episode = r.episode;
  IF ro.room IS NULL THEN
    said := said || 'the thread''s roster was thawed'::text;
  ELSE
    gone := ARRAY(SELECT h FROM unnest(cast_) h WHERE NOT h = ANY (ro.members));
    IF cardinality(gone) > 0 THEN
      said := said || format('%s taken off the roster', (SELECT string_agg('@' || h, ', ') FROM unnest(gone) h));
    END IF;
    gone := ARRAY(SELECT h FROM unnest(ro.members) h WHERE NOT h = ANY (cast_));
    IF cardinality(gone) > 0 THEN
      said := said || format('%s added to the roster', (SELECT string_agg('@' || h, ', ') FROM unnest(gone) h));
    END IF;
    IF ro.frozen_by <> r.engine THEN
      said := said || format('the roster frozen again by @%s', ro.frozen_by);
    END IF;
  END IF;
  IF cardinality(said) = 0 THEN
    RETURN NULL;
  END IF;
  RETURN 'the negotiation''s membership changed: ' || array_to_string(said, '; ');
END
$$;
COMMENT ON FUNCTION mycelium.negotiation_departure IS 'public read';

-- A membership change makes the negotiations it touches due now and moves their seq, so the
-- aligner sees it at once and a step computed before it is refused (read again, then aborted).
CREATE OR REPLACE FUNCTION mycelium.negotiation_membership_changed(p_room text, p_episode text)
RETURNS void LANGUAGE sql AS $$
  UPDATE mycelium.engine_runs r SET deadline = now(), seq = r.seq + 1, updated_at = now()
  WHERE r.room = p_room AND (p_episode IS NULL OR r.episode = p_episode) AND r.state = 'open'
    AND r.kind = 'aligner' AND mycelium.negotiation_departure(r.room, r.id) IS NOT NULL
$$;

-- A change to a thread's roster by anyone but the engine of the negotiation going there.
CREATE OR REPLACE FUNCTION mycelium.rosters_abort_negotiation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.members = OLD.members AND NEW.frozen_by = OLD.frozen_by THEN
    RETURN NULL;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM mycelium.engine_runs r WHERE r.room = OLD.room AND r.episode = OLD.episode
                 AND r.state = 'open' AND r.kind = 'aligner' AND NOT mycelium.acting_as_engine(r.engine)) THEN
    RETURN NULL;
  END IF;
  PERFORM mycelium.negotiation_membership_changed(OLD.room, OLD.episode);
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER t70_rosters_abort_negotiation AFTER UPDATE OR DELETE ON mycelium.rosters
  FOR EACH ROW EXECUTE FUNCTION mycelium.rosters_abort_negotiation();

-- A room's members changed (someone left or was removed): the negotiations a member of it was in.
CREATE OR REPLACE FUNCTION mycelium.rooms_abort_negotiation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.members IS NOT DISTINCT FROM OLD.members AND NEW.owner IS NOT DISTINCT FROM OLD.owner THEN
    RETURN NULL;
  END IF;
  PERFORM mycelium.negotiation_membership_changed(NEW.name, NULL);
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER t75_rooms_abort_negotiation AFTER UPDATE ON mycelium.rooms
  FOR EACH ROW EXECUTE FUNCTION mycelium.rooms_abort_negotiation();

-- The record of a negotiation as upstream writes log/episodes/<short_id>.md: the header (quality
-- and satisfaction as the aligner measured them, the agreement, the team prior it left), the
-- opening positions, the term clarifications, and the move log (one JSON line per move).
CREATE OR REPLACE FUNCTION mycelium.negotiation_record(p_room text, p_run bigint) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT format(E'# Episode %s\n\n- topic: `urn:concept:mycelium:%s`\n- outcome: **%s**\n- participants: %s\n%s%s%s- within: `%s`\n%s\n## Opening Positions\n\n%s\n\n%s## Trace\n\n```jsonl\n%s\n```\n',
           mycelium.episode_urn(r.room, r.short_id), r.room, r.state,
           (SELECT string_agg(h, ', ') FROM jsonb_array_elements_text(r.flow -> 'cast') AS c (h)),
           CASE WHEN r.metrics ? 'mpc' THEN format(E'- quality: MPC %s · GAR %s · SCR %s · provenance weight %s\n',
                  r.metrics ->> 'mpc', r.metrics ->> 'gar', r.metrics ->> 'scr', r.metrics ->> 'provenance_weight')
                ELSE '' END,
           CASE WHEN r.metrics ? 'min_satisfaction'
                THEN format(E'- satisfaction: min %s (least-happy of %s agents, relative to opening asks)\n',
                            r.metrics ->> 'min_satisfaction',
                            (SELECT count(*) FROM jsonb_object_keys(r.metrics -> 'satisfaction')))
                ELSE '' END,
           coalesce((SELECT format(E'- assignments: %s\n', string_agg(format('`%s=%s`', k, v), ', '))
                     FROM jsonb_each_text(r.assignments) AS a (k, v)), '')
             || coalesce((SELECT format(E'- work: %s\n', string_agg(format('`%s`', k), ', '))
                          FROM unnest(mycelium.compiled_work(r.room, r.id)) AS w (k) HAVING count(*) > 0), ''),
           r.episode,
           CASE WHEN r.state = 'converged' AND r.pending ? 'topic'
                THEN format(E'- memory: `l9/rule_update/%s`\n', r.pending ->> 'topic') ELSE '' END,
           coalesce((SELECT string_agg(format('- %s: %s%s', o.key, coalesce(nullif(o.value ->> 'text', ''), '(no words)'),
                                              CASE WHEN jsonb_typeof(o.value -> 'offer') = 'object'
                                                   THEN format(' (offer: %s)', (SELECT string_agg(k || '=' || v, ', ')
                                                        FROM jsonb_each_text(o.value -> 'offer') AS t (k, v)))
                                                   ELSE '' END), E'\n')
                     FROM jsonb_each(r.pending -> 'openings') AS o), '(none)'),
           CASE WHEN jsonb_typeof(r.pending -> 'terms') = 'array' THEN
             format(E'## Term Clarifications\n\n%s\n\n',
                    (SELECT string_agg(format('- %s: %s', t ->> 'term', (SELECT string_agg(h || ' means ' || m, '; ')
                                              FROM jsonb_each_text(t -> 'readings') AS x (h, m))), E'\n')
                     FROM jsonb_array_elements(r.pending -> 'terms') AS t)
                    || coalesce((SELECT E'\n' || string_agg(format('- %s clarifies: %s', k, v), E'\n')
                                 FROM jsonb_each_text(r.pending -> 'clarifications') AS c (k, v)), ''))
             ELSE '' END,
           coalesce((SELECT string_agg(t.entry::text, E'\n' ORDER BY t.turn) FROM mycelium.engine_trace t
                     WHERE t.room = r.room AND t.run_id = r.id), ''))
  FROM mycelium.engine_runs r WHERE r.room = p_room AND r.id = p_run
$$;

-- The record of any run, as log/episodes/<short_id> holds it: a negotiation's, or a flow's.
CREATE OR REPLACE FUNCTION mycelium.run_record(p_room text, p_run bigint) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN r.kind = 'aligner' THEN mycelium.negotiation_record(p_room, p_run)
              ELSE mycelium.episode_record(p_room, p_run) END
  FROM mycelium.engine_runs r WHERE r.room = p_room AND r.id = p_run
$$;
