-- name: claim_transition
-- the verb is called in the select list of a subquery kept apart by OFFSET 0, so it runs once and
-- its row is taken apart without a function scan (which would copy it through a tuple store)
SELECT (c).gate, (c).action, (c).repaired, ((c).transition).*
FROM (SELECT mycelium.claim_transition($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
                                       $17, $18, $19, $20, $21, $22, $23) AS c
      OFFSET 0) AS claimed

-- name: claim_transition_lean
-- the SDK's claim: an answer of run needs nothing of the row but its fence, so the row (read under the
-- claim's lock, as one JSON object, the key's lifetime in seconds) comes back only with other answers
SELECT (c).gate, (c).action, (c).repaired, ((c).transition).fence,
       CASE WHEN (c).action <> 'run'
            THEN to_jsonb((c).transition)
                 || jsonb_build_object('provider_key_ttl', extract(epoch FROM ((c).transition).provider_key_ttl))
       END AS transition
FROM (SELECT mycelium.claim_transition($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
                                       $17, $18, $19, $20, $21, $22, $23) AS c
      OFFSET 0) AS claimed

-- name: renew_lease
SELECT * FROM mycelium.renew_lease($1, $2, $3, $4)

-- name: advance_boundary
SELECT * FROM mycelium.advance_boundary($1, $2, $3, $4)

-- name: record_external_operation
SELECT * FROM mycelium.record_external_operation($1, $2, $3, $4)

-- name: complete_transition
SELECT * FROM mycelium.complete($1, $2, $3, $4)

-- name: complete_transition_ack
-- the SDK's hot path: the same verb, without sending the row back (one field of the call's result:
-- no function scan)
SELECT (mycelium.complete($1, $2, $3, $4::text::jsonb, $4::text)).request_id

-- name: fail_transition
SELECT * FROM mycelium.fail($1, $2, $3, $4, $5)

-- name: mark_unknown
SELECT * FROM mycelium.mark_unknown($1, $2, $3, $4)

-- name: mark_blocked
SELECT * FROM mycelium.mark_blocked($1, $2, $3, $4)

-- name: repair_transition
SELECT * FROM mycelium.repair($1, $2, $3)

-- name: apply_reconcile_result
SELECT * FROM mycelium.apply_reconcile_result($1, $2, $3, $4, $5)

-- name: release_transition
SELECT * FROM mycelium.release($1, $2, $3, $4, $5, $6)

-- name: mark_worker_dead
SELECT * FROM mycelium.mark_worker_dead($1, $2, $3, $4, $5)

-- name: get_transition
SELECT * FROM mycelium.transitions WHERE request_id = $1

-- name: list_transitions
-- $1 stuck: in flight for at least this many seconds (NULL: any); $2 agent; $3 outcome (EXPIRED is
-- derived: IN_FLIGHT past its lease); $4 tool; $5 limit
SELECT * FROM mycelium.transitions t
WHERE ($1::double precision IS NULL
       OR (t.finished_at IS NULL AND t.started_at <= now() - make_interval(secs => $1)))
  AND ($2::text IS NULL OR t.agent_id = $2)
  AND ($3::text IS NULL
       OR ($3 = 'EXPIRED' AND t.terminal_outcome = 'IN_FLIGHT' AND t.lease_until <= now())
       OR t.terminal_outcome = $3)
  AND ($4::text IS NULL OR t.tool = $4)
ORDER BY t.created_at DESC
LIMIT $5
