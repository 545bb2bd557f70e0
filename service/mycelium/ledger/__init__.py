"""The transition ledger SDK: a tool call's side effect happens once, decided by the hub's database."""
