-- Revision 0012_compiler (frozen): The task compiler: a compile job for every run that converged with an agreement, enqueued by the database in the transaction that closes the run, and the work/ rows each job filed (sql/compiler.sql)
CREATE TABLE mycelium.compile_jobs (
  room text NOT NULL,
  run_id bigint NOT NULL,
  state text NOT NULL DEFAULT 'pending' CONSTRAINT compile_state CHECK (state IN ('pending', 'done')),
  taken_by text,
  taken_until timestamptz,
  attempts integer NOT NULL DEFAULT 0,
  source text CONSTRAINT compile_source CHECK (source IN ('model', 'raw')),
  note text,
  created_at timestamptz NOT NULL DEFAULT now(),
  done_at timestamptz,
  PRIMARY KEY (room, run_id),
  FOREIGN KEY (room, run_id) REFERENCES mycelium.engine_runs (room, id) ON DELETE CASCADE,
  CONSTRAINT compile_done_has_source CHECK (state = 'pending' OR source IS NOT NULL)
);
CREATE INDEX compile_jobs_pending ON mycelium.compile_jobs (created_at) WHERE state = 'pending';
COMMENT ON TABLE mycelium.compile_jobs IS
  'One job per converged run with an agreement: its task lines filed as work/ rows once.';

CREATE TABLE mycelium.compiled_tasks (
  room text NOT NULL,
  run_id bigint NOT NULL,
  line integer NOT NULL CONSTRAINT compiled_line_positive CHECK (line >= 1),
  key text NOT NULL,
  text text NOT NULL,
  assignee text,
  parent text,
  filed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (room, run_id, line),
  CONSTRAINT one_compiled_line_per_row UNIQUE (room, key),
  FOREIGN KEY (room, run_id) REFERENCES mycelium.compile_jobs (room, run_id) ON DELETE CASCADE
);
COMMENT ON TABLE mycelium.compiled_tasks IS
  'The work/ rows a compile job filed, one per task line (parent NULL: filed loose).';
