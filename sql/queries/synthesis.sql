-- The synthesizer (sql/synthesis.sql): what a summon it holds distils.

-- name: synthesis_input
-- returns: value
SELECT mycelium.synthesis_input(mycelium.acting(:room, :actor, :actor_kind), :summon, :worker, :all, :limit)
