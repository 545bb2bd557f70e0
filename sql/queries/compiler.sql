-- The task compiler (sql/compiler.sql): jobs taken by workers, what a job compiles, and its filing.
-- The filing posts into the run's thread and returns the wake hints its triggers kept.

-- name: claim_compile_jobs
SELECT * FROM mycelium.claim_compile_jobs(mycelium.acting(:worker, :actor, :actor_kind), :limit, :lease_seconds)

-- name: release_compile_jobs
-- returns: value
SELECT mycelium.release_compile_jobs(mycelium.acting(:worker, :actor, :actor_kind))

-- name: compile_context
-- returns: row
-- what a job compiles: the run's engine, agreement and participants, and its task (NULL when gone)
SELECT r.room, r.id AS run_id, r.short_id, r.engine, r.episode, r.task_key, r.assignments,
       coalesce(r.flow -> 'cast', r.flow -> 'participants', '[]') AS participants,
       (SELECT mycelium.memory_title(m.value, m.meta) FROM mycelium.memories m
        WHERE m.room = r.room AND m.key = r.task_key) AS task_title,
       EXISTS (SELECT 1 FROM mycelium.memories m WHERE m.room = r.room AND m.key = r.task_key) AS task_exists
FROM mycelium.engine_runs r WHERE r.room = :room AND r.id = :run

-- name: file_compiled_tasks
-- returns: row
SELECT r.*, current_setting('mycelium.wake_hints', true) AS wake_hints
FROM mycelium.file_compiled_tasks(mycelium.acting(:room, :actor, :actor_kind, :defer_wakes), :run, :worker,
                                  :lines, :source, :note) r

-- name: compiled_tasks
-- the rows a run's agreement was compiled into, in line order
SELECT c.*, j.source, j.note FROM mycelium.compiled_tasks c
JOIN mycelium.compile_jobs j ON j.room = c.room AND j.run_id = c.run_id
WHERE c.room = :room AND c.run_id = :run ORDER BY c.line
