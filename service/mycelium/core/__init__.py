"""Pure logic with no I/O: handles, mentions, markers, the message search grammar, the wire envelope."""
