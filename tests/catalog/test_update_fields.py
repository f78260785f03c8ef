"""update_fields: declared fields' values set at a new version, no shard written (revision 0015)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

import shardcat
from shardcat.catalog import check, downgrade, head_revision, upgrade
from shardcat.errors import (
    CatalogError,
    KeyNotFoundError,
    KeyTextUnavailableError,
    UnknownKeysError,
)
from shardcat.reading import Catalog

from .helpers import make_dataset, shard_keys, write_shard


def _keys(cat: Catalog, where: str, version: int | str | None = None) -> list[str]:
    chosen = cat.select("train", where, version=version)
    return sorted(k for keys in chosen.keys.values() for k in keys)


def _offsets(cat: Catalog, shard_id: int) -> dict[str, int]:
    with cat.engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT key, byte_offset FROM records WHERE shard_id = :s"), {"s": shard_id}
        )
        return {str(k): int(o) for k, o in rows}


def _labelled(cat: Catalog) -> list[str]:
    """The first shard's records get label = i % 3 (stored with them, as indexing does)."""
    cat.declare_fields("train", {"label": int, "split": str})
    s0 = cat.shards("train")[0]
    keys = shard_keys(0)
    offsets = _offsets(cat, s0.id)
    assert sorted(offsets) == sorted(keys)
    cat.store_fields("train", s0.id, [(offsets[k], {"label": i % 3}) for i, k in enumerate(keys)])
    return keys


def test_update_then_where_at_the_latest_and_at_the_older_version(catalog_url, local_root):
    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 2)
        keys = _labelled(cat)
        before = cat.info("train").version
        other = shard_keys(1)[0]
        done = cat.update_fields(
            "train",
            {keys[0]: {"label": 7, "split": "val"}, other: {"label": 7}, keys[1]: {"label": None}},
            message="relabel",
        )
        assert done.version == before + 1 == cat.info("train").version
        assert (done.keys, done.values, done.unset, done.skipped) == (3, 3, 1, 0)
        assert done.fields == ("label", "split")
        # The latest version reads the new values ...
        assert _keys(cat, "label = 7") == sorted([keys[0], other])
        assert _keys(cat, "split = 'val'") == [keys[0]]
        assert keys[1] in _keys(cat, "label IS NULL")
        assert _keys(cat, "label = 0") == sorted(k for i, k in enumerate(keys) if i % 3 == 0)[1:]
        # ... and the version before reads the values it read.
        assert _keys(cat, "label = 7", version=before) == []
        assert keys[0] in _keys(cat, "label = 0", version=before)
        assert _keys(cat, "label = 1", version=before) == [
            k for i, k in enumerate(keys) if i % 3 == 1
        ]
        assert _keys(cat, "split IS NOT NULL", version=before) == []
        # One version in the log, with no records added or removed; counts on its job.
        latest = cat.log("train")[0]
        assert (latest.number, latest.operation, latest.message) == (
            done.version,
            "update-fields",
            "relabel",
        )
        assert (latest.records_added, latest.records_removed) == (0, 0)
        assert latest.total_records == 2 * len(keys)
        # No shard was written.
        assert len(cat.shards("train")) == 2


def test_updating_twice_keeps_every_version_reading_its_own_value(catalog_url, local_root):
    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 1)
        keys = _labelled(cat)
        v0 = cat.info("train").version
        v1 = shardcat.update_fields(cat, "train", [(keys[0], {"label": 10})]).version
        v2 = shardcat.update_fields(cat, "train", [(keys[0], {"label": 20})]).version
        cat.tag("train", v1, "first")
        assert [_keys(cat, f"label = {n}", version=v) for n, v in ((10, v1), (20, v2))] == [
            [keys[0]],
            [keys[0]],
        ]
        assert _keys(cat, "label = 10") == [] and _keys(cat, "label = 20") == [keys[0]]
        assert _keys(cat, "label = 10", version="first") == [keys[0]]
        assert keys[0] in _keys(cat, "label = 0", version=v0)
        # Each key counts once at every version: no record appears twice in a selection.
        for v in (v0, v1, v2):
            assert cat.select("train", "label IS NOT NULL", version=v).count == len(keys)
        # The same key twice in one call: the later value wins.
        v3 = cat.update_fields("train", [(keys[2], {"label": 1}), (keys[2], {"label": 5})])
        assert (v3.keys, v3.values) == (1, 1)
        assert _keys(cat, "label = 5") == [keys[2]]
        # Expiring every version but v2 and v3 drops the values only they read.
        cat.untag("train", "first")
        expired = cat.expire("train", keep_last=1, dry_run=True).expired
        assert v1 in expired
        with cat.engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT count(*) FROM record_fields")).scalar()
        cat.expire("train", keep_last=2)
        with cat.engine.connect() as conn:
            after = conn.execute(sa.text("SELECT count(*) FROM record_fields")).scalar()
        # Kept: v2 and v3. Gone: the stored label 0 of keys[0] (superseded at v1) and the
        # value 10 (read by v1 only); keys[2]'s stored label stays: v2 reads it.
        assert rows - after == 2
        assert keys[2] in _keys(cat, "label = 2", version=v2)
        assert _keys(cat, "label = 20", version=v2) == [keys[0]]
        assert cat.select("train", "label IS NOT NULL").count == len(keys)


def test_unknown_keys_are_an_error_or_skipped(catalog_url, local_root):
    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 1)
        keys = _labelled(cat)
        version = cat.info("train").version
        missing = [f"nope/{i}" for i in range(12)]
        values = {k: {"label": 4} for k in [keys[0], *missing]}
        with pytest.raises(UnknownKeysError, match=r"12 key\(s\): 'nope/0'.* and 2 more") as err:
            cat.update_fields("train", values)
        assert "nothing was changed" in str(err.value) and "on_missing='skip'" in str(err.value)
        assert err.value.keys == missing and isinstance(err.value, KeyNotFoundError)
        assert cat.info("train").version == version
        assert _keys(cat, "label = 4") == []
        done = cat.update_fields("train", values, on_missing="skip")
        assert (done.keys, done.values, done.skipped) == (1, 1, 12)
        assert _keys(cat, "label = 4") == [keys[0]]
        # A deleted key has no live record either.
        cat.delete_keys("train", [keys[1]])
        with pytest.raises(KeyNotFoundError, match=repr(keys[1])):
            cat.update_fields("train", {keys[1]: {"label": 4}})


def test_undeclared_fields_and_wrong_kinds_are_refused(catalog_url, local_root):
    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 1)
        keys = _labelled(cat)
        version = cat.info("train").version
        with pytest.raises(CatalogError, match=r"'score' is not declared.*label \(number\)"):
            cat.update_fields("train", {keys[0]: {"score": 0.5}})
        with pytest.raises(CatalogError, match="holds number values, not 'x'"):
            cat.update_fields("train", {keys[0]: {"label": "x"}})
        with pytest.raises(CatalogError, match="holds text values, not 3"):
            cat.update_fields("train", {keys[0]: {"split": 3}})
        with pytest.raises(ValueError, match="on_missing"):
            cat.update_fields("train", {keys[0]: {"label": 1}}, on_missing="ignore")  # type: ignore[arg-type]
        assert cat.info("train").version == version
        # Declared, every kind works: booleans are numbers 0/1, floats keep their value.
        cat.declare_fields("train", {"score": float, "ok": bool})
        cat.update_fields("train", {keys[0]: {"score": 0.25, "ok": True}, keys[1]: {"ok": False}})
        assert _keys(cat, "score = 0.25 AND ok = 1") == [keys[0]]
        assert _keys(cat, "ok = 0") == [keys[1]]


def test_hash_only_datasets_refuse_update_fields(catalog_url, local_root):
    with Catalog(catalog_url) as cat:
        cat.create_dataset("h", local_root, keys="hash")
        cat.register_shard("h", write_shard(f"{local_root}/h.shard", shard_keys(3)))
        cat.declare_fields("h", {"label": int})
        with pytest.raises(KeyTextUnavailableError, match="update_fields needs the keys' text"):
            cat.update_fields("h", {shard_keys(3)[0]: {"label": 1}})
        assert cat.info("h").version == 1


def test_storing_a_shards_values_again_keeps_the_updates(catalog_url, local_root):
    """Indexing a shard again (store_fields) replaces the values stored with its records only."""
    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 1)
        keys = _labelled(cat)
        v1 = cat.update_fields("train", {keys[0]: {"label": 50}}).version
        s0 = cat.shards("train")[0]
        offsets = _offsets(cat, s0.id)
        cat.store_fields("train", s0.id, [(offsets[k], {"label": 8}) for k in keys])
        assert _keys(cat, "label = 50") == [keys[0]]
        assert _keys(cat, "label = 8") == sorted(keys[1:])
        # The stored values are not versioned (indexing replaces them for every version):
        # before the update, keys[0] reads the new stored value; from it on, the update's.
        assert _keys(cat, "label = 8", version=v1 - 1) == sorted(keys)
        assert _keys(cat, "label = 50", version=v1) == [keys[0]]
        for v in (v1 - 1, v1):
            assert cat.select("train", "label IS NOT NULL", version=v).count == len(keys)


def test_upgrade_from_0014_keeps_the_values_and_downgrade_keeps_the_latest(catalog_url, local_root):
    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 2)
        keys = _labelled(cat)
    assert downgrade(catalog_url, "0014") == (head_revision(), "0014")
    engine = sa.create_engine(catalog_url)
    try:
        with engine.connect() as conn:
            columns = {c["name"] for c in sa.inspect(conn).get_columns("record_fields")}
    finally:
        engine.dispose()
    assert "added_version" not in columns
    assert upgrade(catalog_url) == ("0014", head_revision())
    assert check(catalog_url) == []
    with Catalog(catalog_url) as cat:
        before = cat.info("train").version
        assert _keys(cat, "label = 1") == [k for i, k in enumerate(keys) if i % 3 == 1]
        assert _keys(cat, "label = 1", version=before) == _keys(cat, "label = 1")
        cat.update_fields("train", {keys[1]: {"label": 9}, keys[2]: {"label": None}})
        assert _keys(cat, "label = 9") == [keys[1]]
        assert keys[1] in _keys(cat, "label = 1", version=before)
    # Down again keeps the latest values (the history of values is what 0014 cannot hold).
    assert downgrade(catalog_url, "0014") == (head_revision(), "0014")
    assert upgrade(catalog_url) == ("0014", head_revision())
    with Catalog(catalog_url) as cat:
        assert _keys(cat, "label = 9") == [keys[1]]
        assert keys[2] in _keys(cat, "label IS NULL")
        assert cat.select("train", "label IS NOT NULL").count == len(keys) - 1


def test_storing_values_while_an_update_waits_leaves_one_live_value(catalog_url, local_root):
    """store_fields (index_fields) and update_fields of the same records, concurrently.

    On PostgreSQL (READ COMMITTED) an update that waited for a store's transaction
    found the stored rows it meant to supersede deleted, and the store had not seen
    the update: both rows stayed live, and ``where=`` gave the sample twice.
    """
    if not catalog_url.startswith("postgresql"):
        pytest.skip("SQLite runs one write transaction at a time")
    import threading
    import time

    from sqlalchemy.orm import Session

    from shardcat.catalog.fields import store_field_values

    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 1)
        keys = _labelled(cat)
        s0 = cat.shards("train")[0]
        offsets = _offsets(cat, s0.id)
        errors: list[BaseException] = []

        def update() -> None:
            try:
                cat.update_fields("train", {keys[0]: {"label": 50}})
            except BaseException as e:  # handed to the test's thread
                errors.append(e)

        with Session(cat.engine) as store:
            store_field_values(store, "train", s0.id, [(offsets[k], {"label": 8}) for k in keys])
            me = store.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
            waiter = threading.Thread(target=update)
            waiter.start()
            with cat.engine.connect() as conn:
                deadline = time.monotonic() + 20
                # Each question in a transaction of its own: one transaction keeps reading the
                # pg_stat_activity snapshot it first took (without the waiter's backend).
                while not conn.execute(
                    sa.text(
                        "SELECT count(*) FROM pg_stat_activity WHERE :me = ANY(pg_blocking_pids(pid))"
                    ),
                    {"me": me},
                ).scalar_one():
                    conn.rollback()
                    assert waiter.is_alive(), "update_fields did not wait for the store"
                    assert time.monotonic() < deadline, "update_fields never waited for the store"
                    time.sleep(0.05)
            store.commit()
        waiter.join(30)
        assert not waiter.is_alive() and not errors
        with cat.engine.connect() as conn:
            live = conn.execute(
                sa.text(
                    "SELECT count(*) FROM record_fields WHERE shard_id = :s AND byte_offset = :o "
                    "AND name = 'label' AND removed_version IS NULL"
                ),
                {"s": s0.id, "o": offsets[keys[0]]},
            ).scalar_one()
        assert live == 1
        assert _keys(cat, "label = 50") == [keys[0]]
        assert _keys(cat, "label = 8") == sorted(keys[1:])
        assert cat.select("train", "label IS NOT NULL").count == len(keys)


def test_a_key_holding_nul_is_an_unknown_key_on_both_databases(catalog_url, local_root):
    """PostgreSQL cannot bind text holding NUL: no record has such a key, so it is unknown."""
    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 1)
        keys = _labelled(cat)
        before = cat.info("train").version
        with pytest.raises(UnknownKeysError, match="no live record for 1 key") as e:
            cat.update_fields("train", {"a\x00b": {"label": 1}, keys[0]: {"label": 5}})
        assert e.value.keys == ["a\x00b"]
        assert cat.info("train").version == before
        done = cat.update_fields(
            "train", {"a\x00b": {"label": 1}, keys[0]: {"label": 5}}, on_missing="skip"
        )
        assert (done.keys, done.skipped) == (1, 1)
        assert _keys(cat, "label = 5") == [keys[0]]


def test_nan_is_refused_as_a_value_so_every_backend_reads_the_same(catalog_url, local_root):
    # NaN was stored as NULL by SQLite but as NaN by PostgreSQL (where `quality > 0` is true
    # for it), and written as non-standard JSON `NaN` into the version's manifest, which verify
    # then reported as a history mismatch (NaN != NaN).
    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 1)
        keys = _labelled(cat)
        cat.declare_fields("train", {"quality": float})
        version = cat.info("train").version
        for nan in (float("nan"), float("-nan")):
            with pytest.raises(CatalogError, match=r"field 'quality' holds number.*not nan.*unset"):
                cat.update_fields("train", {keys[0]: {"quality": nan}})
        assert cat.info("train").version == version
        cat.update_fields("train", {keys[0]: {"quality": float("inf")}})
        assert _keys(cat, "quality > 0") == [keys[0]]


def test_nan_stored_with_a_shard_reads_as_missing(catalog_url, local_root):
    # A dataframe's missing label is NaN: stored with the records it is no value (NULL), as a
    # sample without the field is, on every backend.
    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 1)
        cat.declare_fields("train", {"score": float})
        s0 = cat.shards("train")[0]
        keys = shard_keys(0)
        offsets = _offsets(cat, s0.id)
        stored = cat.store_fields(
            "train",
            s0.id,
            [(offsets[keys[0]], {"score": float("nan")}), (offsets[keys[1]], {"score": 2.0})],
        )
        assert stored == 1
        assert _keys(cat, "score IS NULL") == sorted(keys[:1] + keys[2:])
        assert _keys(cat, "score > 0") == [keys[1]]


def test_declare_with_the_update_is_one_transaction(catalog_url, local_root):
    with Catalog(catalog_url) as cat:
        cat.create_dataset("h", local_root, keys="hash")
        cat.register_shard("h", write_shard(f"{local_root}/h.shard", shard_keys(3)))
        with pytest.raises(KeyTextUnavailableError):
            cat.update_fields("h", {shard_keys(3)[0]: {"label": 1}}, declare={"label": int})
        assert cat.fields("h") == {}
        make_dataset(cat, local_root, 1)
        key = shard_keys(0)[0]
        done = shardcat.update_fields(cat, "train", {key: {"split": "val"}}, declare={"split": str})
        assert done.values == 1 and cat.fields("train") == {"split": "text"}
        assert _keys(cat, "split = 'val'") == [key]
