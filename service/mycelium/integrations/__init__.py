"""Optional framework integrations (each imports its framework only when applied)."""
