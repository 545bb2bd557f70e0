"""Transition ledger: transitions, gates, leases, receipts (issue: transition ledger)

Revision ID: 0002_transitions
Revises: 0001_foundation
Create Date: 2026-11-30
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = "0002_transitions"
down_revision = "0001_foundation"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_frozen(op, "0002_transitions.sql")


def downgrade() -> None:
    run_as_owner(op, """
      DO $drop$
      DECLARE
        sigs text[];
        sig text;
      BEGIN
        SELECT array_agg(p.oid::regprocedure::text) INTO sigs FROM pg_proc p
        WHERE p.pronamespace = 'mycelium'::regnamespace AND p.proname = ANY (ARRAY[
          'side_effect_class', 'default_retry_permission', 'default_spendability', 'capability_floor',
          'boundary_rank', 'transition_verb', 'transitions_guard',
          'transitions_no_truncate',
          'transition_state', 'transition_gate', 'claim_action', 'transition_detail', 'transition_lost',
          'lease_end', 'claim_transition', 'renew_lease', 'advance_boundary', 'record_external_operation',
          'complete', 'fail', 'mark_outcome', 'mark_unknown', 'mark_blocked', 'repair',
          'apply_reconcile_result', 'release', 'mark_worker_dead',
          'receipt_ts', 'receipt_preimage', 'receipt_preimage_before_seq', 'receipt_preimage_after_seq',
          'receipt_seq_field', 'receipt_hash', 'receipt_lane_of', 'receipts_before_insert',
          'receipts_append_only', 'transitions_receipt', 'register_receipt_key',
          'retire_receipt_keys', 'unsigned_receipt_batch', 'sign_receipts', 'verify_receipt_chain']);
        FOREACH sig IN ARRAY coalesce(sigs, '{}') LOOP
          EXECUTE format('DROP FUNCTION IF EXISTS %s CASCADE', sig);
        END LOOP;
      END
      $drop$;
      DROP VIEW IF EXISTS mycelium.receipt_export, mycelium.reconciled_transitions,
        mycelium.hard_blocks_awaiting_human, mycelium.side_effects_per_tool_per_day;
      DROP TABLE IF EXISTS mycelium.receipts_signed_through, mycelium.receipt_signatures,
        mycelium.receipt_keys, mycelium.receipt_heads, mycelium.receipts, mycelium.transitions CASCADE;
      DROP TYPE IF EXISTS mycelium.claim CASCADE;
      DROP DOMAIN IF EXISTS mycelium.receipt_kind, mycelium.receipt_seq, mycelium.receipt_lane,
        mycelium.transition_kind,
        mycelium.effect_class, mycelium.spendability, mycelium.retry_permission, mycelium.capability,
        mycelium.effect_boundary, mycelium.transition_outcome, mycelium.effect_phase,
        mycelium.reconcile_status,
        mycelium.operator_resolution, mycelium.request_key, mycelium.ledger_name, mycelium.ledger_label,
        mycelium.provider_ref, mycelium.json_object, mycelium.fence_token, mycelium.attempt_count,
        mycelium.key_ttl;
    """)
