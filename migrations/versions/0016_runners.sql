-- Revision 0016_runners (frozen): runners, the registered ways to start an agent for a handle, and
-- their jobs, the record of every start (sql/runners.sql).
CREATE TABLE mycelium.runners (
  room text NOT NULL REFERENCES mycelium.rooms (name) ON DELETE CASCADE,
  handle text NOT NULL CONSTRAINT runner_handle_normalised CHECK (mycelium.handle_is_normalised(handle)),
  command text[] NOT NULL CONSTRAINT runner_has_command CHECK (cardinality(command) >= 1),
  cwd text NOT NULL DEFAULT '',
  env text[] NOT NULL DEFAULT '{}',
  max_concurrent integer NOT NULL DEFAULT 1 CONSTRAINT runner_max_concurrent CHECK (max_concurrent BETWEEN 1 AND 64),
  timeout_s double precision NOT NULL DEFAULT 600 CONSTRAINT runner_timeout CHECK (timeout_s > 0 AND timeout_s <= 86400),
  max_turns_per_room integer NOT NULL DEFAULT 100 CONSTRAINT runner_max_turns CHECK (max_turns_per_room >= 1),
  max_attempts integer NOT NULL DEFAULT 3 CONSTRAINT runner_max_attempts CHECK (max_attempts BETWEEN 1 AND 10),
  approval text NOT NULL DEFAULT 'none' CONSTRAINT runner_approval CHECK (approval IN ('none', 'required')),
  turns integer NOT NULL DEFAULT 0,
  failures integer NOT NULL DEFAULT 0,
  paused_reason text,
  created_by text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, handle)
);

CREATE TABLE mycelium.runner_jobs (
  room text NOT NULL,
  id bigint GENERATED ALWAYS AS IDENTITY,
  handle text NOT NULL,
  kind text NOT NULL DEFAULT 'wake' CONSTRAINT runner_job_kind CHECK (kind IN ('wake', 'test')),
  state text NOT NULL CONSTRAINT runner_job_state
    CHECK (state IN ('waiting', 'queued', 'running', 'done', 'failed', 'skipped', 'denied')),
  reason text,
  attempt integer NOT NULL DEFAULT 1,
  retry_of bigint,
  wake_position bigint,
  wake_message uuid,
  episode text,
  task text,
  not_before timestamptz NOT NULL DEFAULT now(),
  approved_by text,
  approved_at timestamptz,
  worker text,
  taken_until timestamptz,
  command text[],
  cwd text,
  pid integer,
  inbox_mark bigint,
  started_at timestamptz,
  ended_at timestamptz,
  exit_code integer,
  stdout_tail text,
  stderr_tail text,
  duration_ms double precision,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, id),
  FOREIGN KEY (room, handle) REFERENCES mycelium.runners (room, handle) ON DELETE CASCADE
);

CREATE UNIQUE INDEX runner_jobs_one_pending ON mycelium.runner_jobs (room, handle)
  WHERE state IN ('waiting', 'queued');

CREATE INDEX runner_jobs_queued ON mycelium.runner_jobs (not_before) WHERE state = 'queued';

CREATE INDEX runner_jobs_running ON mycelium.runner_jobs (taken_until) WHERE state = 'running';

INSERT INTO mycelium.setting_kinds (name, value_type, default_value, min_value, max_value, description) VALUES
  ('runners.wake_grace_seconds', 'number', '1', 0, 600,
   'How long a wake of a present handle waits for one of its processes to take the message before its runner starts one.'),
  ('runners.pause_after', 'number', '5', 1, 1000,
   'A runner whose jobs failed this many times in a row pauses until an operator resumes it.');
