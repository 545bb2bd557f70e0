"""The markdown mirror: every memory exported as ``<data>/rooms/<room>/<key>.md``; the database stays
the truth, the files follow it."""
