-- Negotiations: the aligner's runs (sql/negotiations.sql); steps go through engine_step.

-- name: start_negotiation
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.start_negotiation(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :summon, :worker,
                                :flow, :open, :lease_seconds) r

-- name: negotiation_log
-- returns: row
-- a negotiation's move log (its trace, in turn order) and whether the thread's roster is still the
-- one it froze (its members, frozen by its engine)
SELECT coalesce((SELECT jsonb_agg(t.entry ORDER BY t.turn) FROM mycelium.engine_trace t
                 WHERE t.room = r.room AND t.run_id = r.id), '[]') AS moves,
       EXISTS (SELECT 1 FROM mycelium.rosters ro
               WHERE ro.room = r.room AND ro.episode = r.episode AND ro.frozen_by = r.engine
                 AND ro.members = ARRAY(SELECT jsonb_array_elements_text(r.flow -> 'cast'))) AS roster_intact
FROM mycelium.engine_runs r WHERE r.room = :room AND r.id = :run

-- name: team_prior
-- returns: row
-- the team prior a converged negotiation on this topic left (l9/rule_update/<topic>), if any
SELECT m.key, m.body, m.meta FROM mycelium.memories m WHERE m.room = :room AND m.key = 'l9/rule_update/' || :topic
