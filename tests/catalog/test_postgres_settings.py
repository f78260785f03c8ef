"""What every PostgreSQL connection of a catalog runs with (``session._configure_postgresql``)."""

from __future__ import annotations

import sqlalchemy as sa

from shardcat.reading import Catalog

from .helpers import shard_keys, write_shard


def test_every_connection_runs_without_jit(postgres_url, local_root):
    """JIT never pays back on index probes: pooled, new and the lookup's own connection."""
    with Catalog(postgres_url) as cat:
        cat.create_dataset("d", local_root)
        cat.register_shard("d", write_shard(f"{local_root}/a.shard", shard_keys(0)))
        assert cat.get("d", shard_keys(0)[0]).key == shard_keys(0)[0]
        with cat.engine.connect() as one, cat.engine.connect() as two:
            for conn in (one, two):
                assert conn.execute(sa.text("SHOW jit")).scalar_one() == "off"
                conn.rollback()
        lookup = cat._lookup().raw  # the point lookup's dedicated connection
        assert lookup.query("SHOW jit", ()) == [("off",)]
        # A SET in a transaction rolled back would be undone; this one lasts the session.
        with cat.engine.begin() as conn:
            assert conn.execute(sa.text("SHOW jit")).scalar_one() == "off"
