-- Transitions: the ledger's verbs, called by the SDK's store (in these parameter orders) and by the
-- HTTP routes through the gateway. Only the operators' verbs (release, worker death) declare an
-- actor: the others are fenced by their owner, the worker that holds the lease.

-- name: claim_transition
-- needs: writer
-- returns: row
-- the verb is called in the select list of a subquery kept apart by OFFSET 0, so it runs once and
-- its row is taken apart without a function scan (which would copy it through a tuple store)
SELECT (c).gate, (c).action, (c).repaired, ((c).transition).*
FROM (SELECT mycelium.claim_transition(:request_id, :transition_key, :tool, :owner, :side_effect_class,
                                       :agent_id, :policy_version, :lease_ttl, :spendability,
                                       :retry_permission, :capability, :kind, :scope, :dispatch_id,
                                       :args_hash, :idempotency_key, :key_param, :key_ttl,
                                       :incoming_key, :has_reconciler, :reconciled, :defer_read_unknown,
                                       :presumed_dead_after) AS c
      OFFSET 0) AS claimed

-- name: claim_transition_lean
-- needs: writer
-- the SDK's claim: an answer of run needs nothing of the row but its fence, so the row (read under the
-- claim's lock, as one JSON object, the key's lifetime in seconds) comes back only with other answers
SELECT (c).gate, (c).action, (c).repaired, ((c).transition).fence,
       CASE WHEN (c).action <> 'run'
            THEN to_jsonb((c).transition)
                 || jsonb_build_object('provider_key_ttl', extract(epoch FROM ((c).transition).provider_key_ttl))
       END AS transition
FROM (SELECT mycelium.claim_transition(:request_id, :transition_key, :tool, :owner, :side_effect_class,
                                       :agent_id, :policy_version, :lease_ttl, :spendability,
                                       :retry_permission, :capability, :kind, :scope, :dispatch_id,
                                       :args_hash, :idempotency_key, :key_param, :key_ttl,
                                       :incoming_key, :has_reconciler, :reconciled, :defer_read_unknown,
                                       :presumed_dead_after) AS c
      OFFSET 0) AS claimed

-- name: renew_lease
-- needs: writer
-- returns: row
SELECT * FROM mycelium.renew_lease(:request_id, :owner, :fence, :lease_ttl)

-- name: advance_boundary
-- needs: writer
-- returns: row
SELECT * FROM mycelium.advance_boundary(:request_id, :owner, :fence, :boundary)

-- name: record_external_operation
-- needs: writer
-- returns: row
SELECT * FROM mycelium.record_external_operation(:request_id, :owner, :fence, :ref)

-- name: complete_transition
-- needs: writer
-- returns: row
-- :result_text is the same result as the caller's JSON text (a redispatch returns it, keys in order)
SELECT * FROM mycelium.complete(:request_id, :owner, :fence, :result, :result_text)

-- name: complete_transition_ack
-- needs: writer
-- the SDK's hot path: the same verb, answering with the request id only
SELECT mycelium.complete_ack(:request_id, :owner, :fence, :result::text::jsonb, :result::text)

-- name: fail_transition
-- needs: writer
-- returns: row
SELECT * FROM mycelium.fail(:request_id, :owner, :fence, :error, :after_effect)

-- name: mark_unknown
-- needs: writer
-- returns: row
SELECT * FROM mycelium.mark_unknown(:request_id, :owner, :fence, :error)

-- name: mark_blocked
-- needs: writer
-- returns: row
SELECT * FROM mycelium.mark_blocked(:request_id, :owner, :fence, :error)

-- name: repair_transition
-- needs: writer
-- returns: row
SELECT * FROM mycelium.repair(:request_id, :owner, :fence)

-- name: apply_reconcile_result
-- needs: writer
-- returns: row
SELECT * FROM mycelium.apply_reconcile_result(:request_id, :fence, :status, :result, :by)

-- name: release_transition
-- returns: row
SELECT * FROM mycelium.release(mycelium.acting(:request_id, :actor, :actor_kind), :verified, :by, :reason, :result,
                               :expected_fence)

-- name: mark_worker_dead
SELECT * FROM mycelium.mark_worker_dead(mycelium.acting(:owner, :actor, :actor_kind), :by, :reason, :override,
                                        :presumed_dead_after)

-- name: get_transition
-- returns: row
SELECT * FROM mycelium.transitions WHERE request_id = :request_id

-- name: list_transitions
-- stuck: in flight for at least this many seconds (NULL: any); agent; outcome (EXPIRED is derived:
-- IN_FLIGHT past its lease); tool; at most limit
SELECT * FROM mycelium.transitions t
WHERE (:stuck::double precision IS NULL
       OR (t.finished_at IS NULL AND t.started_at <= now() - make_interval(secs => :stuck)))
  AND (:agent::text IS NULL OR t.agent_id = :agent)
  AND (:outcome::text IS NULL
       OR (:outcome = 'EXPIRED' AND t.terminal_outcome = 'IN_FLIGHT' AND t.lease_until <= now())
       OR t.terminal_outcome = :outcome)
  AND (:tool::text IS NULL OR t.tool = :tool)
ORDER BY t.created_at DESC
LIMIT :limit
