"""The board's background work and the lease watch; the rules themselves live in sql/board.sql
and sql/assignments.sql."""
