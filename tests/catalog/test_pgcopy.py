"""``catalog/pgcopy.py``: binary COPY of whole columns, on a real PostgreSQL.

Several chunks (each of 65,536 rows built and sent in turn), every column type
it writes (the bool of ``records.key_sorted`` among them), a server error in
the middle of the stream, and a registration of more than one chunk.
"""

from __future__ import annotations

import numpy as np
import psycopg
import pytest
import sqlalchemy as sa

from shardcat.catalog.pgcopy import _CHUNK, copy_binary
from shardcat.reading import Catalog

from .helpers import write_shard

ROWS = 2 * _CHUNK + 1234  # three chunks, the last one short


def _connect(postgres_url: str) -> psycopg.Connection:
    url = sa.make_url(postgres_url)
    options = dict(url.query)
    return psycopg.connect(
        host=url.host,
        port=url.port,
        user=url.username,
        dbname=url.database,
        options=options.get("options", ""),
    )


def test_every_type_over_several_chunks(postgres_url):
    n = ROWS
    with _connect(postgres_url) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (a int4, b int8, c int2, f bool, s bytea, k text)")
        values = np.arange(n, dtype=np.int64)
        copy_binary(
            cur,
            "t",
            ("a", "b", "c", "f", "s", "k"),
            ("int4", "int8", "int2", "bool", "bytes", "bytes"),
            (
                7,  # a scalar, repeated on every row
                values * 3_000_000_000,
                (values % 30_000).astype(np.int16),
                False,
                [i.to_bytes(4, "little") for i in range(n)],
                [f"key/{i}".encode() for i in range(n)],
            ),
        )
        cur.execute("SELECT count(*), min(a), max(a), bool_or(f), max(b), max(c) FROM t")
        assert cur.fetchone() == (n, 7, 7, False, (n - 1) * 3_000_000_000, 29_999)
        for i in (0, _CHUNK - 1, _CHUNK, n - 1):
            cur.execute("SELECT s, k FROM t WHERE b = %s", (i * 3_000_000_000,))
            assert cur.fetchone() == (i.to_bytes(4, "little"), f"key/{i}")


def test_a_server_error_in_the_middle_is_raised_and_nothing_is_kept(postgres_url):
    with _connect(postgres_url) as conn:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE t (a int8 CHECK (a < 100000))")
        conn.commit()
        with pytest.raises(psycopg.errors.CheckViolation), conn.cursor() as cur:
            copy_binary(cur, "t", ("a",), ("int8",), (np.arange(ROWS, dtype=np.int64),))
        conn.rollback()
        with conn.cursor() as cur:  # the connection is usable, the table empty
            cur.execute("SELECT count(*) FROM t")
            assert cur.fetchone() == (0,)


def test_a_shard_of_several_chunks_registers_unsorted(postgres_url, local_root):
    keys = [f"k/{i:06d}" for i in range(ROWS)]
    info = write_shard(f"{local_root}/big.shard", keys, make=lambda k: {"t": k})
    with Catalog(postgres_url) as cat:
        cat.create_dataset("u", local_root, keys="unsorted")
        cat.register_shard("u", info)
        with cat.engine.connect() as conn:
            n, texts, sorted_rows = conn.execute(
                sa.text(
                    "SELECT count(*), count(key), count(*) FILTER (WHERE key_sorted) FROM records"
                )
            ).one()
        assert (n, texts, sorted_rows) == (ROWS, ROWS, 0)
        picks = [keys[0], keys[_CHUNK], keys[-1]]
        assert [r["t"].decode() for r in cat.get_many("u", picks).records] == picks
