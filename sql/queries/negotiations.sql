-- Negotiations: the aligner's runs (sql/negotiations.sql); steps go through engine_step.

-- name: start_negotiation
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.start_negotiation(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :summon, :worker,
                                :flow, :open, :lease_seconds) r

-- name: negotiation_log
-- returns: row
-- what a negotiation's move reads beside its run, replies and departure (due_engine_runs) when its
-- worker does not hold the mechanism at the run's turn: the moves recorded after trace turn :after
-- (in turn order; 0: the whole log; the trace is append-only, so a worker holding the mechanism at
-- an earlier turn reads only what came after it)
SELECT coalesce((SELECT jsonb_agg(t.entry ORDER BY t.turn) FROM mycelium.engine_trace t
                 WHERE t.room = r.room AND t.run_id = r.id AND t.turn > :after), '[]') AS moves
FROM mycelium.engine_runs r WHERE r.room = :room AND r.id = :run

-- name: team_prior
-- returns: row
-- the team prior a converged negotiation on this topic left (l9/rule_update/<topic>), if any
SELECT m.key, m.body, m.meta FROM mycelium.memories m WHERE m.room = :room AND m.key = 'l9/rule_update/' || :topic
