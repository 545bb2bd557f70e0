"""The opt-in guards: the TTL cache (``@protect`` / ``Session``), transcript checks
(``MessageValidator``, ``HistoryGuard``), tool boundaries (``@bounded``, ``ToolRegistry``,
``ToolRunner``) and ``StateFlush``. Each module imports only the standard library."""
