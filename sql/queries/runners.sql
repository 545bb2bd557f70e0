-- Runners and their jobs (sql/runners.sql). The workers' calls (claim, renew, started, finish) are
-- the hub's own; the rest are a member's or an operator's (add, remove, pause, test, approve).

-- name: add_runner
-- returns: row
SELECT * FROM mycelium.add_runner(mycelium.acting(:room, :actor, :actor_kind), :handle, CAST(:command AS text[]),
                                  :cwd, CAST(:env AS text[]), :max_concurrent, :timeout_s, :max_turns_per_room,
                                  :approval, :max_attempts, :by)

-- name: remove_runner
-- returns: row
SELECT * FROM mycelium.remove_runner(mycelium.acting(:room, :actor, :actor_kind), :handle)

-- name: pause_runner
-- returns: row
SELECT * FROM mycelium.pause_runner(mycelium.acting(:room, :actor, :actor_kind), :handle, :reason)

-- name: test_runner
-- returns: row
SELECT * FROM mycelium.test_runner(mycelium.acting(:room, :actor, :actor_kind), :handle)

-- name: decide_runner_job
-- returns: row
SELECT * FROM mycelium.decide_runner_job(mycelium.acting(:room, :actor, :actor_kind), :id, :approve, :by)

-- name: list_runners
-- a room's runners, with how many of their jobs run and wait now; 404 without the room
SELECT r.*,
       (SELECT count(*) FROM mycelium.runner_jobs j
        WHERE j.room = r.room AND j.handle = r.handle AND j.state = 'running') AS running,
       (SELECT count(*) FROM mycelium.runner_jobs j
        WHERE j.room = r.room AND j.handle = r.handle AND j.state IN ('waiting', 'queued')) AS pending
FROM mycelium.runners r
WHERE r.room = :room AND mycelium.room_known(:room)
ORDER BY r.handle

-- name: get_runner
-- returns: row
SELECT * FROM mycelium.require_runner(:room, :handle)

-- name: list_runner_jobs
-- a room's jobs, newest first, of one handle and in one state when asked; 404 without the room
SELECT j.room, j.id, j.handle, j.kind, j.state, j.reason, j.attempt, j.retry_of, j.wake_position,
       j.wake_message, j.episode, j.task, j.not_before, j.approved_by, j.approved_at, j.worker, j.command,
       j.cwd, j.pid, j.started_at, j.ended_at, j.exit_code, j.duration_ms, j.created_at
FROM mycelium.runner_jobs j
WHERE j.room = :room AND mycelium.room_known(:room)
  AND (CAST(:handle AS text) IS NULL OR j.handle = mycelium.normalize_handle(:handle))
  AND (CAST(:state AS text) IS NULL OR j.state = :state)
  AND (CAST(:before AS bigint) IS NULL OR j.id < :before)
ORDER BY j.id DESC
LIMIT :limit

-- name: get_runner_job
-- returns: row
-- one job with the tails of its output (no row: none such)
SELECT * FROM mycelium.runner_jobs WHERE room = :room AND id = :id AND mycelium.room_known(:room)

-- name: claim_runner_jobs
-- the jobs this worker starts now, with their runner's timeout and the names of the variables to pass
SELECT j.*, r.timeout_s, r.env AS env_names
FROM mycelium.claim_runner_jobs(mycelium.acting(:worker, :actor, :actor_kind), :limit, :lease_seconds) j
JOIN mycelium.runners r ON r.room = j.room AND r.handle = j.handle

-- name: renew_runner_jobs
-- returns: value
SELECT mycelium.renew_runner_jobs(mycelium.acting(:worker, :actor, :actor_kind), :lease_seconds)

-- name: runner_job_started
-- returns: row
SELECT * FROM mycelium.runner_job_started(mycelium.acting(:room, :actor, :actor_kind), :id, :worker, :pid)

-- name: finish_runner_job
-- returns: row
SELECT * FROM mycelium.finish_runner_job(mycelium.acting(:room, :actor, :actor_kind), :id, :worker, :exit_code,
                                         :reason, :stdout_tail, :stderr_tail)
