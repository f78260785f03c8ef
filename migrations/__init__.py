"""shardcat's Alembic migrations (installed as the ``shardcat.migrations`` package)."""
