"""Catalog.keys / Catalog.count: prefix ranges on the key index, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
import sys

import pytest
import sqlalchemy as sa

from shardcat.catalog.keys import keys_statement, prefix_end
from shardcat.errors import DatasetNotFoundError
from shardcat.reading import Catalog

from .helpers import write_shard

KEYS = ["a", "a/", "a/b", "a/b/c", "a0", "ab", "b", "é/1", "é/2", "\U0010ffff", "\U0010ffffz", "ꟿ"]


def test_prefix_end_is_the_first_string_after_the_prefix_range():
    assert prefix_end("cam3/") == "cam30"
    assert prefix_end("a\U0010ffff") == "b"
    assert prefix_end("\U0010ffff") is None
    assert prefix_end("\ud7ff") == "\ue000"  # surrogates are not characters
    for prefix in ("a", "a/", "é", "\U0010fffe"):
        end = prefix_end(prefix)
        assert end is not None and prefix < end
        # byte order = code point order: nothing starting with the prefix reaches `end`
        assert (prefix + chr(sys.maxunicode) * 3).encode() < end.encode()


@pytest.fixture
def cat(catalog_url, tmp_path):
    with Catalog(catalog_url) as c:
        c.create_dataset("d", str(tmp_path))
        c.register_shard("d", write_shard(str(tmp_path / "d-0.shard"), KEYS, shard_number=0))
        c.create_dataset("other", str(tmp_path / "o"))
        c.register_shard("other", write_shard(str(tmp_path / "o-0.shard"), ["a/x"], shard_number=0))
        yield c


def test_keys_by_prefix_in_byte_order(cat):
    in_bytes = sorted(KEYS, key=lambda k: k.encode())
    assert list(cat.keys("d")) == in_bytes
    for prefix in ("a", "a/", "a/b", "é", "\U0010ffff", "z", ""):
        want = [k for k in in_bytes if k.startswith(prefix)]
        assert list(cat.keys("d", prefix=prefix)) == want, prefix
        assert cat.count("d", prefix=prefix) == len(want), prefix
    assert list(cat.keys("d", prefix="a", limit=2)) == ["a", "a/"]
    assert cat.count("other") == 1  # another dataset's keys are not counted
    with pytest.raises(DatasetNotFoundError):
        cat.keys("nope")


def test_removed_shards_keys_are_not_listed(cat, tmp_path):
    cat.remove_shard("d", str(tmp_path / "d-0.shard"))
    assert list(cat.keys("d")) == [] and cat.count("d", prefix="a") == 0


def test_a_prefix_search_is_a_range_on_the_key_index(cat):
    dialect = cat.engine.dialect.name
    stmt = keys_statement(dialect, 1, "a/", None)
    sql = str(stmt.compile(cat.engine, compile_kwargs={"literal_binds": True}))
    with cat.engine.connect() as conn:
        if dialect == "postgresql":
            # Tiny tables are scanned whole when that is cheaper: forbid it, to see the
            # index is usable for the range (and the order), not that it wins at 12 rows.
            conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
            conn.execute(sa.text("SET LOCAL enable_bitmapscan = off"))
            plan = "\n".join(r[0] for r in conn.execute(sa.text("EXPLAIN " + sql)))
            assert "ix_records_dataset_id_key " in plan + " ", plan
            assert "Index Cond" in plan and "Sort" not in plan, plan
        else:
            plan = "\n".join(r[-1] for r in conn.execute(sa.text("EXPLAIN QUERY PLAN " + sql)))
            # a covering index even: the keys come from the index alone
            assert "INDEX ix_records_dataset_id_key (dataset_id=? AND key>? AND key<?)" in plan, (
                plan
            )
            assert "TEMP B-TREE" not in plan, plan  # read in index order, never sorted


def test_pages_after_a_cursor_cover_every_key_once(cat):
    in_bytes = sorted(KEYS, key=lambda k: k.encode())
    for prefix, size in ((None, 1), (None, 5), ("a", 2), ("é", 1)):
        want = [k for k in in_bytes if k.startswith(prefix or "")]
        pages, after = [], None
        while True:
            page = list(cat.keys("d", prefix=prefix, after=after, limit=size))
            if not page:
                break
            pages.append(page)
            after = page[-1]
        assert [k for p in pages for k in p] == want, (prefix, size)
    assert list(cat.dataset("d").keys(after="a0", limit=2)) == ["ab", "b"]
    assert list(cat.keys("d", after="\U0010ffffz")) == []


def test_a_kept_versions_keys_are_the_ones_it_reads(cat, tmp_path):
    from shardcat.errors import VersionNotFoundError

    from .helpers import write_shard

    first = cat.info("d").version
    info = write_shard(str(tmp_path / "more.shard"), ["a1", "zz"])
    cat.register_shard("d", info)
    cat.delete_keys("d", ["b"])
    cat.dataset("d").tag(first, "before")
    latest = list(cat.keys("d"))
    assert "zz" in latest and "b" not in latest
    then = list(cat.keys("d", version=first))
    assert then == sorted(KEYS, key=lambda k: k.encode())  # as it was: b there, zz not yet
    assert list(cat.keys("d", version="before", prefix="a", after="a/")) == [
        k for k in then if k.startswith("a") and k > "a/"
    ]
    assert list(cat.dataset("d").keys(version=first, limit=2)) == then[:2]
    with pytest.raises(VersionNotFoundError):
        cat.keys("d", version=999)
    with pytest.raises(VersionNotFoundError):
        cat.keys("d", version="no-such-tag")


def test_a_page_after_a_cursor_seeks_the_key_index_without_offset(cat):
    dialect = cat.engine.dialect.name
    stmt = keys_statement(dialect, 1, "a", 10, after="a/b")
    sql = str(stmt.compile(cat.engine, compile_kwargs={"literal_binds": True}))
    # SQLAlchemy writes LIMIT n OFFSET 0 on SQLite: no row is skipped by counting.
    assert re.findall(r"OFFSET\s+(\S+)", sql.upper()) in ([], ["0"]), sql
    plan = _ordered_plan(cat, sql)
    if dialect == "sqlite":
        assert "INDEX ix_records_dataset_id_key (dataset_id=? AND key>? AND key<?)" in plan, plan


def _ordered_plan(cat, sql: str) -> str:
    """``sql``'s plan, checked to read the key index in order (no sort); PostgreSQL may not
    scan tiny tables whole, to see the index is usable, not that it wins at 12 rows."""
    with cat.engine.connect() as conn:
        if cat.engine.dialect.name == "postgresql":
            conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
            conn.execute(sa.text("SET LOCAL enable_bitmapscan = off"))
            plan = "\n".join(r[0] for r in conn.execute(sa.text("EXPLAIN " + sql)))
            assert "Sort" not in plan, plan
        else:
            plan = "\n".join(r[-1] for r in conn.execute(sa.text("EXPLAIN QUERY PLAN " + sql)))
            assert "TEMP B-TREE" not in plan, plan
    assert "ix_records_dataset_id_key " in plan + " ", plan
    return plan


def test_a_first_page_walks_the_key_index_without_sorting(cat):
    """``keys --limit`` without prefix or cursor: the key index is partial (``key IS NOT NULL``,
    revision 0014), and the statement must say so for the planner to read it in order."""
    dialect = cat.engine.dialect.name
    stmt = keys_statement(dialect, 1, None, 10)
    _ordered_plan(cat, str(stmt.compile(cat.engine, compile_kwargs={"literal_binds": True})))
