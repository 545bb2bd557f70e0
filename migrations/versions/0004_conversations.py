"""Conversations: handles and mentions, the thread write gate (floors, frozen rosters), pings,
amendments, durable inboxes and presence, message search

Revision ID: 0004_conversations
Revises: 0003_board
Create Date: 2026-11-30
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = "0004_conversations"
down_revision = "0003_board"
branch_labels = None
depends_on = None

# Every function this revision defines (dropped by name, whatever the signature).
FUNCTIONS = (
    "normalize_handle", "handle_is_normalised", "handle_problem", "handle_problem_sentence", "require_handle",
    "mentions_in",
    "loud_mentions", "silent_mentions", "mentions_handle", "message_wakes", "episode_ref",
    "messages_follow_up", "messages_wake", "post_message", "amend_message", "handle_list",
    "thread_known", "describe_floor", "check_thread_write", "messages_admit", "floors_before_write",
    "floors_after_write", "hold_floor", "release_floor", "freeze_roster", "thaw_roster",
    "delivery_cursors_forward", "inbox_anchor", "touch_presence", "take_next", "reply", "room_members",
    "message_type_of", "stance_of", "message_has", "thread_matches", "index_message", "named_handles",
    "message_search_forget", "stored_without_document", "message_document",
)


def upgrade() -> None:
    apply_frozen(op, "0004_conversations.sql")


def downgrade() -> None:
    names = ", ".join(f"'{name}'" for name in FUNCTIONS)
    run_as_owner(op, f"""
      DROP TRIGGER IF EXISTS message_search_forget ON mycelium.rooms;
      DROP VIEW IF EXISTS mycelium.message_documents;
      DROP TABLE IF EXISTS mycelium.message_search CASCADE;
      DROP TRIGGER IF EXISTS messages_admit ON mycelium.messages;
      DROP TRIGGER IF EXISTS messages_follow_up ON mycelium.messages;
      DROP TRIGGER IF EXISTS messages_wake ON mycelium.messages;
      -- CASCADE takes the verbs whose signatures name these tables' or the view's row types
      DROP TABLE IF EXISTS mycelium.early_deliveries, mycelium.delivery_cursors, mycelium.presence,
                           mycelium.floors, mycelium.rosters CASCADE;
      DROP VIEW IF EXISTS mycelium.timeline CASCADE;
      DROP INDEX IF EXISTS mycelium.messages_amendments;
      ALTER TABLE mycelium.messages DROP COLUMN IF EXISTS wakes, DROP COLUMN IF EXISTS mentions,
                                    DROP COLUMN IF EXISTS silent_mentions;
      DO $drop$
      DECLARE f regprocedure;
      BEGIN
        FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
                 WHERE p.pronamespace = 'mycelium'::regnamespace AND p.proname IN ({names})
        LOOP
          EXECUTE format('DROP FUNCTION %s', f);
        END LOOP;
      END
      $drop$;
    """)
