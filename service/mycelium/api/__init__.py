"""The HTTP layer: thin Litestar routes over the database's verbs."""
