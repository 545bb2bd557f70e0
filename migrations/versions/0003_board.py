"""Board: tasks, assignment leases, dependency gate, notices, timeline

Revision ID: 0003_board
Revises: 0002_transitions
Create Date: 2026-11-30
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = "0003_board"
down_revision = "0002_transitions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_frozen(op, "0003_board.sql")


def downgrade() -> None:
    # the board first (its triggers sit on memories and memory_links, its notices in messages)
    run_as_owner(op, """
      DROP TRIGGER IF EXISTS board_rows_filed ON mycelium.memories;
      DROP TRIGGER IF EXISTS board_rows_moved ON mycelium.memories;
      DROP TRIGGER IF EXISTS board_rows_no_lease_fields ON mycelium.memories;
      DROP TRIGGER IF EXISTS memory_links_no_dependency_cycle ON mycelium.memory_links;
      DROP FUNCTION IF EXISTS mycelium.next_lease_expiry();
      DROP FUNCTION IF EXISTS mycelium.sweep_expired_leases(integer);
      DROP FUNCTION IF EXISTS mycelium.renew_tasks(text, text);
      DROP FUNCTION IF EXISTS mycelium.resolve_task(text, text, text);
      DROP FUNCTION IF EXISTS mycelium.release_task(text, text, text, text);
      DROP FUNCTION IF EXISTS mycelium.claim_task(text, text, text, integer, boolean);
      DROP FUNCTION IF EXISTS mycelium.task_row_of(text, text);
      DROP FUNCTION IF EXISTS mycelium.lock_task_lease(text, text);
      DROP FUNCTION IF EXISTS mycelium.refuse_task_lease(text, text);
      DROP FUNCTION IF EXISTS mycelium.read_assignment(text, text);
      DROP VIEW IF EXISTS mycelium.board_rows;
      DROP VIEW IF EXISTS mycelium.lease_states;
      DROP FUNCTION IF EXISTS mycelium.lease_read(mycelium.memories, mycelium.assignments);
      DROP FUNCTION IF EXISTS mycelium.lease_written(mycelium.memories, mycelium.assignments, text[]);
      DROP FUNCTION IF EXISTS mycelium.lease_assignment(mycelium.assignments);
      DROP TYPE IF EXISTS mycelium.lease_read;
      DROP FUNCTION IF EXISTS mycelium.announce_expiry(mycelium.assignments, text);
      DROP FUNCTION IF EXISTS mycelium.task_lease_live(mycelium.assignments);
      DROP TABLE IF EXISTS mycelium.lease_expiries;
      DROP TABLE IF EXISTS mycelium.assignments;
      DROP SEQUENCE IF EXISTS mycelium.claim_ids;
      DROP DOMAIN IF EXISTS mycelium.work_key;
      DROP DOMAIN IF EXISTS mycelium.lease_state;
      DROP DOMAIN IF EXISTS mycelium.lease_owner;
      DROP DOMAIN IF EXISTS mycelium.lease_minutes;
      DROP FUNCTION IF EXISTS mycelium.assignments_before_write();
      DROP FUNCTION IF EXISTS mycelium.assignments_after_write();
      DROP FUNCTION IF EXISTS mycelium.assignments_settled_ins();
      DROP FUNCTION IF EXISTS mycelium.assignments_settled_upd();
      DROP FUNCTION IF EXISTS mycelium.assignments_note_settled();
      DROP FUNCTION IF EXISTS mycelium.assignments_raise_unblocked();
      DROP FUNCTION IF EXISTS mycelium.assignments_before_delete();
      DROP FUNCTION IF EXISTS mycelium.waiting_on(text, text);
      DROP FUNCTION IF EXISTS mycelium.task_lease_end(timestamptz, integer);
      DROP FUNCTION IF EXISTS mycelium.create_task(text, text, text, text, text, text);
      DROP FUNCTION IF EXISTS mycelium.promote_row(text, text, text, text);
      DROP FUNCTION IF EXISTS mycelium.dismiss_row(text, text, text);
      DROP FUNCTION IF EXISTS mycelium.unblock_row(text, text, text);
      DROP FUNCTION IF EXISTS mycelium.block_row(text, text, text, text);
      DROP FUNCTION IF EXISTS mycelium.require_board_row(text, text);
      DROP FUNCTION IF EXISTS mycelium.read_fields(text, text);
      DROP FUNCTION IF EXISTS mycelium.write_fields(text, text, text, jsonb);
      DROP FUNCTION IF EXISTS mycelium.set_dependency_gate(boolean, text, text);
      DROP FUNCTION IF EXISTS mycelium.dependency_gate_on(text);
      DROP FUNCTION IF EXISTS mycelium.board_rows_no_lease_fields();
      DROP FUNCTION IF EXISTS mycelium.board_rows_moved();
      DROP FUNCTION IF EXISTS mycelium.board_rows_filed();
      DROP FUNCTION IF EXISTS mycelium.raise_unblocked(text, text[], text);
      DROP FUNCTION IF EXISTS mycelium.row_notice(text, text, text, jsonb, jsonb, text, jsonb);
      DROP FUNCTION IF EXISTS mycelium.memory_links_no_dependency_cycle();
      DROP FUNCTION IF EXISTS mycelium.row_settled(jsonb, text);
      DROP VIEW IF EXISTS mycelium.board_dependencies;
      DROP FUNCTION IF EXISTS mycelium.row_of_episode(text, text);
      DROP FUNCTION IF EXISTS mycelium.episode_of(text, text);
      DROP FUNCTION IF EXISTS mycelium.task_slug(text);
      DROP FUNCTION IF EXISTS mycelium.memory_title(jsonb, jsonb);
      DROP FUNCTION IF EXISTS mycelium.memory_body_title(text);
      DROP FUNCTION IF EXISTS mycelium.board_require_handle(text, text);
      DROP FUNCTION IF EXISTS mycelium.board_handle_problem(text);
      DROP FUNCTION IF EXISTS mycelium.board_handle(text);
      DROP FUNCTION IF EXISTS mycelium.board_vocabulary();
      DROP FUNCTION IF EXISTS mycelium.is_assignable_key(text);
      DROP FUNCTION IF EXISTS mycelium.is_board_key(text);
      DROP FUNCTION IF EXISTS mycelium.reserved_lease_fields();
      DROP FUNCTION IF EXISTS mycelium.settled_statuses();
      DROP FUNCTION IF EXISTS mycelium.board_priorities();
      DROP FUNCTION IF EXISTS mycelium.board_kinds();
      DROP FUNCTION IF EXISTS mycelium.board_statuses();
      DROP FUNCTION IF EXISTS mycelium.board_namespaces();
      DELETE FROM mycelium.config WHERE name = 'board.dependency_gate';
    """)
    run_as_owner(op, """
      DROP FUNCTION IF EXISTS mycelium.post_notice(text, text, text, jsonb);
      DROP TABLE IF EXISTS mycelium.messages;
      DROP TABLE IF EXISTS mycelium.message_positions;
      DROP FUNCTION IF EXISTS mycelium.messages_before_insert();
      DROP FUNCTION IF EXISTS mycelium.messages_after_insert();
      DROP FUNCTION IF EXISTS mycelium.live_episode(text);
      DROP FUNCTION IF EXISTS mycelium.message_subkind_valid(text, text);
      DROP FUNCTION IF EXISTS mycelium.message_kind_valid(text);
      DROP FUNCTION IF EXISTS mycelium.payload_type_valid(text);
      DROP FUNCTION IF EXISTS mycelium.sender_role_valid(text);
    """)
