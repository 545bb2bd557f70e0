-- Revision 0009_engines: the tables of sql/engines.sql as this revision introduced them (frozen).
-- Engines: room citizens played by the hub's workers (a conductor walking flows, a persona played by
-- a model), the summons that wake them, and every run as a durable episode.
--
--   * engines: one row per (room, handle), with its kind; create_engine also writes the upstream
--     manifest memory agents/<handle> (frontmatter adapter: engine, kind), in the same transaction.
--     Only the engine itself (an actor declared as that engine) may write as its handle (403).
--   * engine_summons: an @-mention of a registered engine in a message (or, for a persona, a message
--     whose recipients name it) is recorded by a trigger on the insert of that message, so a summon
--     exists iff its message committed: never lost, never fired twice (unique per message and
--     engine). Engines' own text never summons (a conductor's turn addressed to a persona does).
--   * engine_runs: one run per thread at a time (a unique index on the open runs); a run is worked
--     by whichever worker holds its lease (claimed with FOR UPDATE SKIP LOCKED, renewed by its
--     worker, taken over by another after it expires). The run row says which step is current and
--     whether its question was posted; engine_step() is the one transaction that closes a step
--     (its trace entry), posts the next question and moves the floor, compared-and-swapped on the
--     run's seq: a worker that lost its lease, or computed from a stale state, changes nothing.
--   * engine_trace: one row per step taken (turn 1, 2, …: no gaps, no repeats), append-only.
--   * engine_posts: every message a run posted, in order (the run's slice of the thread).
--   * persona_turns: what a persona said and heard, per (room, handle), so it remembers across
--     turns and across workers.

CREATE TABLE mycelium.engines (
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  handle text NOT NULL CONSTRAINT engine_handle_normalised CHECK (mycelium.handle_is_normalised(handle)),
  kind text NOT NULL CONSTRAINT engine_kind_known CHECK (kind IN ('conductor', 'persona')),
  description text NOT NULL DEFAULT '',
  created_by text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, handle)
);
CREATE TABLE mycelium.engine_summons (
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  id bigint GENERATED ALWAYS AS IDENTITY,
  engine text NOT NULL,
  kind text NOT NULL,
  message_id uuid NOT NULL,
  position bigint NOT NULL,
  episode text NOT NULL,
  sender text NOT NULL,
  content text NOT NULL,
  how text NOT NULL CONSTRAINT summon_how CHECK (how IN ('mention', 'addressed')),
  state text NOT NULL DEFAULT 'pending' CONSTRAINT summon_state CHECK (state IN ('pending', 'done')),
  taken_by text,
  taken_until timestamptz,
  attempts integer NOT NULL DEFAULT 0,
  outcome text CONSTRAINT summon_outcome CHECK (outcome IN ('answered', 'started', 'refused', 'failed',
                                                              'not_admitted')),
  answer_id uuid,
  run_id bigint,
  error text,
  created_at timestamptz NOT NULL DEFAULT now(),
  done_at timestamptz,
  PRIMARY KEY (room, id),
  CONSTRAINT one_summon_per_message UNIQUE (room, message_id, engine)
);
CREATE INDEX engine_summons_pending ON mycelium.engine_summons (id) WHERE state = 'pending';
CREATE TABLE mycelium.engine_runs (
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  id bigint GENERATED ALWAYS AS IDENTITY,
  short_id text NOT NULL DEFAULT substr(md5(gen_random_uuid()::text), 1, 12),
  engine text NOT NULL,
  kind text NOT NULL DEFAULT 'conductor',
  episode text NOT NULL,
  task_key text,
  summon_id bigint NOT NULL,
  protocol text NOT NULL,
  flow jsonb NOT NULL,
  state text NOT NULL DEFAULT 'open'
    CONSTRAINT run_state CHECK (state IN ('open', 'resolved', 'rejected', 'converged', 'failed')),
  seq integer NOT NULL DEFAULT 0,
  turn integer NOT NULL DEFAULT 0,
  step text,
  asked_position bigint,
  waiting text[] NOT NULL DEFAULT '{}',
  deadline timestamptz,
  pending jsonb NOT NULL DEFAULT '{}',
  lease_owner text,
  lease_until timestamptz,
  reason text,
  outcome_text text,
  metrics jsonb,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  closed_at timestamptz,
  PRIMARY KEY (room, id),
  CONSTRAINT run_short_id_unique UNIQUE (room, short_id),
  CONSTRAINT one_run_per_summon UNIQUE (room, summon_id)
);
CREATE UNIQUE INDEX engine_runs_one_per_thread ON mycelium.engine_runs (room, episode) WHERE state = 'open';
CREATE INDEX engine_runs_open ON mycelium.engine_runs (lease_until) WHERE state = 'open';
CREATE TABLE mycelium.engine_trace (
  room text NOT NULL,
  run_id bigint NOT NULL,
  turn integer NOT NULL CONSTRAINT trace_turn_positive CHECK (turn >= 1),
  step text NOT NULL,
  entry jsonb NOT NULL,
  worker text,
  at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, run_id, turn),
  FOREIGN KEY (room, run_id) REFERENCES mycelium.engine_runs (room, id) ON DELETE CASCADE
);
CREATE TABLE mycelium.engine_posts (
  room text NOT NULL,
  run_id bigint NOT NULL,
  seq integer NOT NULL,
  message_id uuid NOT NULL,
  event text NOT NULL,
  turn integer NOT NULL,
  worker text,
  PRIMARY KEY (room, run_id, seq),
  CONSTRAINT one_post_per_message UNIQUE (message_id),
  FOREIGN KEY (room, run_id) REFERENCES mycelium.engine_runs (room, id) ON DELETE CASCADE
);
CREATE TABLE mycelium.persona_turns (
  room text NOT NULL,
  handle text NOT NULL,
  seq bigint GENERATED ALWAYS AS IDENTITY,
  role text NOT NULL CONSTRAINT persona_turn_role CHECK (role IN ('user', 'assistant')),
  content text NOT NULL,
  summon_id bigint,
  at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, handle, seq),
  FOREIGN KEY (room, handle) REFERENCES mycelium.engines (room, handle) ON DELETE CASCADE
);
