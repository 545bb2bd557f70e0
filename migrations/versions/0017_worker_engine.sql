-- Revision 0017_worker_engine (frozen): what the worker engine adds (sql/worker_engine.sql): summons
-- by a board notice (a row filed naming a worker, a parent whose parts are all settled) with the
-- row they are about, one completion summon per parent, the swarms a room runs, and the worker
-- engine's settings.
ALTER TABLE mycelium.engine_summons DROP CONSTRAINT summon_how;
ALTER TABLE mycelium.engine_summons ADD CONSTRAINT summon_how
  CHECK (how IN ('mention', 'addressed', 'filed', 'completed'));
ALTER TABLE mycelium.engine_summons ADD COLUMN row_key text;
CREATE UNIQUE INDEX engine_summons_one_completion ON mycelium.engine_summons (room, row_key)
  WHERE how = 'completed';

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

INSERT INTO mycelium.setting_kinds (name, value_type, default_value, min_value, max_value, description) VALUES
  ('workers.timeout_seconds', 'number', '600', 1, 86400,
   'How long one turn of a worker engine''s agent command may run before it is stopped and counted as failed.'),
  ('workers.max_turns_per_room', 'number', '50', 1, 100000,
   'How many turns a worker engine takes in one room; past it, a summon is answered with a refusal.'),
  ('workers.tools', 'boolean', 'true', NULL, NULL,
   'A worker engine runs its agent command in its worktree; off, it is write-only: the hub''s model answers, nothing runs.');
