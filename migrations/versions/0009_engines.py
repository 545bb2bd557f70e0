"""Engines: registered engines, their summons, runs with leases, steps and traces, persona memory

Revision ID: 0009_engines
Revises: 0008_room_names
Create Date: 2026-12-02
"""

from alembic import op

from mycelium.db.migrate import apply_frozen, run_as_owner

revision = "0009_engines"
down_revision = "0008_room_names"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_frozen(op, "0009_engines.sql")


def downgrade() -> None:
    run_as_owner(op, """
      -- (CASCADE: the functions that take or return these rows go with them)
      DROP TRIGGER IF EXISTS messages_admit_engine ON mycelium.messages;
      DROP TRIGGER IF EXISTS messages_summon_engines ON mycelium.messages;
      DROP TRIGGER IF EXISTS memories_protocol_valid ON mycelium.memories;
      DROP VIEW IF EXISTS mycelium.episodes;
      DROP FUNCTION IF EXISTS mycelium.invoke_engine(text, text, text, text, text),
        mycelium.coordinate(text, text, text, text, text);
      DROP TABLE IF EXISTS mycelium.persona_turns, mycelium.engine_posts, mycelium.engine_trace,
        mycelium.engine_runs, mycelium.engine_summons, mycelium.engines CASCADE;
    """)
