"""The batch statement stepped in C (reading/_cpoint.c ``rows()``, issue 10), on real SQLite files.

``get_many`` of whole records at the latest version runs the lookup's own
batch statement on the compiled point lookup's connection. Its rows must be
the rows the Python driver returns, in every state the statement decides
(staged, removed, replaced, deleted, tar shards, colliding hashes), and
anything unusual must go back to the Python path.
"""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from shardcat.errors import DatasetNotFoundError
from shardcat.format import checksums, recordcodec
from shardcat.format.checksums import signed_key_hashes
from shardcat.format.tar import scan_tar
from shardcat.reading import Catalog, point
from shardcat.testing.collisions import colliding_key_hashes
from shardcat.testing.tars import wds_samples, write_wds_tar

from . import test_point_compiled as point_tests
from .helpers import make_dataset, shard_keys, write_shard
from .test_point_compiled import _TIMEOUT

# The same SQLite-file catalog fixtures as the compiled point lookup's tests.
sqlite_url = point_tests.sqlite_url
cat = point_tests.cat

pytestmark = pytest.mark.skipif(
    point.active() != "compiled" or recordcodec.active() != "compiled",
    reason="the compiled point lookup is not available or not chosen here",
)


def _hashes(keys: list[str]) -> list[int]:
    return signed_key_hashes(k.encode() for k in keys)


def _both(cat: Catalog, dataset: str, keys: list[str]) -> tuple[Any, list[Any]]:
    """The compiled rows (None: not handled) and the Python driver's rows of one batch."""
    lookup = cat._lookup()
    assert point.is_compiled(lookup._point_lookup), "the compiled lookup is off for this catalog"
    hashes = _hashes(keys)
    fast = lookup._point_lookup.rows(dataset, hashes)
    slow = lookup._query(lookup._batch, (dataset, json.dumps(hashes)))
    return fast, slow


def _same_rows(cat: Catalog, dataset: str, keys: list[str]) -> list[Any]:
    fast, slow = _both(cat, dataset, keys)
    assert fast is not None
    assert sorted(fast) == sorted(tuple(r) for r in slow)
    for row in fast:  # the driver's types, one by one
        assert [type(v) for v in row[:6]] == [str, int, int, bytes, str, int]
    return fast


def _by_key(result: Any) -> dict[str, Any]:
    return dict(zip(result.keys, result.records, strict=True))


def _described(result: Any) -> list[Any]:
    return [
        None
        if r is None
        else (r.key, r.offset, r.length, [(n, e.content_type, bytes(e.data)) for n, e in r.items()])
        for r in result
    ]


def test_rows_equal_the_drivers_in_every_state_the_statement_decides(cat, local_root, tmp_path):
    make_dataset(cat, local_root, 3)
    live = [k for i in range(3) for k in shard_keys(i)]
    rows = _same_rows(cat, "train", live)
    assert {r[4] for r in rows} == set(live)
    # Rows of one shard share one URL object (what batch_table keys its shards by).
    by_url: dict[str, set[int]] = {}
    for r in rows:
        by_url.setdefault(r[0], set()).add(id(r[0]))
    assert len(by_url) == 3 and all(len(ids) == 1 for ids in by_url.values())
    # A staged shard, a removed record, a replaced record, a removed shard.
    job = cat.begin_job("train")
    cat.register_shard("train", write_shard(f"{local_root}/staged.shard", ["staged/1"]), job=job)
    cat.delete_keys("train", [live[2]])
    job2 = cat.begin_job("train")
    new = write_shard(f"{local_root}/new.shard", [live[3]], make=lambda k: {"txt": "new"})
    cat.register_shard("train", new, job=job2)
    cat.commit_job(job2, on_duplicate="replace")
    cat.remove_shard("train", cat.locate("train", shard_keys(2)[0]).url)
    asked = [*live, "staged/1", "nope"]
    rows = _same_rows(cat, "train", asked)
    keys = [r[4] for r in rows]
    assert "staged/1" not in keys and live[2] not in keys and "nope" not in keys
    assert keys.count(live[3]) == 1
    assert not set(shard_keys(2)) & set(keys)
    # get_many through either path: the same records.
    compiled = cat.get_many("train", asked)
    previous = point.use("python")
    try:
        with Catalog(cat.url) as slow:
            assert not point.is_compiled(slow._lookup()._point_lookup)
            assert _described(slow.get_many("train", asked)) == _described(compiled)
    finally:
        point.use(previous)
    assert _by_key(compiled)[live[3]]["txt"].decode() == "new"
    assert sorted(compiled.missing) == sorted(["staged/1", "nope", live[2], *shard_keys(2)])
    # A tar indexed in place: its rows carry their kind and layout signature.
    (tmp_path / "tars").mkdir()
    tar = Path(write_wds_tar(tmp_path / "tars" / "a.tar", n=10))
    cat.create_dataset("wds", str(tar.parent))
    cat.register_shard("wds", scan_tar(tar))
    tar_keys = [s["__key__"] for s in wds_samples(tar)]
    assert len(tar_keys) == 10
    rows = _same_rows(cat, "wds", tar_keys)
    assert rows and all(r[6] == "tar" and isinstance(r[7], str) for r in rows)
    # An unknown dataset: no rows, and the Python path names the error.
    assert _same_rows(cat, "other", live) == []
    with pytest.raises(DatasetNotFoundError):
        cat.get_many("other", live)


def _hashed_rows_both(cat: Catalog, dataset: str, keys: list[str]) -> tuple[Any, list[Any]]:
    """The compiled rows of the statement whose rows end with their key hash, and the driver's."""
    lookup = cat._lookup()
    # Looked up at the call: colliding_key_hashes narrows the module's function.
    hashes = checksums.signed_key_hashes(k.encode() for k in keys)
    fast = lookup._point_lookup.rows(dataset, hashes, True)
    sql = lookup._sql("batch_hashed", None)[0]
    return fast, [tuple(r) for r in lookup._query(sql, (dataset, json.dumps(hashes)))]


def test_a_hash_only_datasets_rows_come_with_their_hashes_as_the_drivers_do(cat, local_root):
    """A hash-only dataset's batch (keys NULL, each row ending with its key hash) is
    stepped on the compiled lookup's connection too, collisions and all."""
    cat.create_dataset("h", f"{local_root}/h", keys="hash")
    cat.register_shard("h", write_shard(f"{local_root}/h/0.shard", shard_keys(0)))
    cat.register_shard("h", write_shard(f"{local_root}/h/1.shard", shard_keys(1)))
    keys = shard_keys(0) + shard_keys(1)
    fast, slow = _hashed_rows_both(cat, "h", [*keys, "nope"])
    assert fast is not None and sorted(fast) == sorted(slow)
    assert len(fast) == len(keys)
    for row in fast:
        # url, offset, length, spans, key (NULL), alignment, kind and layout (NULL:
        # native), group, key hash.
        none = type(None)
        assert [type(v) for v in row] == [str, int, int, bytes, none, int, none, none, int, int]
    assert sorted(r[9] for r in fast) == sorted(_hashes(keys))
    # The statement without hashes: the same rows, keys None, as the driver returns them
    # (the batch that meets a hash-only dataset reads that, then asks with hashes).
    plain, driver = _both(cat, "h", keys)
    assert plain is not None and sorted(plain) == sorted(tuple(r) for r in driver)
    assert {r[4] for r in plain} == {None}
    # Under 3-bit hashes most keys share theirs: every row of an asked hash comes back.
    with colliding_key_hashes(bits=3):
        cat.create_dataset("c", f"{local_root}/c", keys="hash")
        cat.register_shard("c", write_shard(f"{local_root}/c/0.shard", keys))
        fast, slow = _hashed_rows_both(cat, "c", keys[:5])
        assert fast is not None and sorted(fast) == sorted(slow) and len(fast) > 5
        batch = cat.get_many("c", [*keys[:5], "nope"])
        assert [r.key if r else None for r in batch] == [*keys[:5], None]


def test_a_met_hash_only_datasets_batch_sends_nothing_through_the_python_connection(
    cat, local_root
):
    cat.create_dataset("h", f"{local_root}/h", keys="hash")
    cat.register_shard("h", write_shard(f"{local_root}/h/0.shard", shard_keys(0)))
    keys = shard_keys(0)
    assert [r.key for r in cat.get_many("h", keys[:3])] == keys[:3]  # met now
    lookup = cat._lookup()
    sent: list[str] = []
    lookup.raw.conn.set_trace_callback(sent.append)
    try:
        batch = cat.get_many("h", [*keys[3:], "nope"])
    finally:
        lookup.raw.conn.set_trace_callback(None)
    assert [r.key if r else None for r in batch] == [*keys[3:], None]
    assert not [s for s in sent if "json_each" in s], sent  # the batch statement ran in C


def test_colliding_hashes_come_back_as_rows_and_never_as_the_wrong_record(cat, local_root):
    make_dataset(cat, local_root, 1)
    keys = shard_keys(0)
    # Another key's hash asked for: the row comes back (the statement matches
    # hashes), and the key check after it drops it.
    fast, slow = _both(cat, "train", keys[:3])
    lookup = cat._lookup()
    wrong = lookup._point_lookup.rows("train", _hashes([keys[0]]))
    assert [r[4] for r in wrong] == [keys[0]]
    table = recordcodec.batch_table(wrong, {"not-" + keys[0]: None})
    assert table.keys == []
    assert fast is not None and sorted(fast) == sorted(tuple(r) for r in slow)


def test_a_close_asked_while_the_batch_runs_leaves_it_to_the_python_path(cat, local_root):
    """The close is deferred to the batch's end (``busy``), and the rows it fetched are not handed
    out: the Python path answers, with the closed lookup's error."""
    make_dataset(cat, local_root, 1)
    keys = shard_keys(0)
    c = cat._lookup()._point_lookup
    # Long enough to be closed in the middle: 200,000 hashes probed, a few of them live keys.
    rng = random.Random(0)
    hashes = _hashes(keys) + [rng.randrange(-(2**63), 2**63) for _ in range(200_000)]
    seen_busy: list[int] = []

    def close_when_busy() -> None:
        deadline = time.monotonic() + _TIMEOUT
        while not c.busy and time.monotonic() < deadline:
            pass
        seen_busy.append(c.busy)
        c.close()

    closer = threading.Thread(target=close_when_busy)
    closer.start()
    got = c.rows("train", hashes)
    closer.join(_TIMEOUT)
    assert seen_busy and seen_busy[0] != 0, "the close did not land while the batch ran"
    assert got is None
    assert c.closed


def test_unusual_cases_go_back_to_the_python_path(cat, local_root, sqlite_url):
    make_dataset(cat, local_root, 1)
    keys = shard_keys(0)
    lookup = cat._lookup()
    c = lookup._point_lookup
    assert c.rows("train", []) == []
    assert c.rows(7, _hashes(keys)) is None  # type: ignore[arg-type]
    assert c.rows("bad\udcff", _hashes(keys)) is None  # not UTF-8: the Python path
    assert c.rows("train", tuple(_hashes(keys))) is None  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be ints"):
        c.rows("train", ["1"])  # type: ignore[list-item]
    with pytest.raises(OverflowError):
        c.rows("train", [2**64])
    with pytest.raises(TypeError, match="2 or 3 arguments"):
        c.rows("train")  # type: ignore[call-arg]
    # A key SQLite holds as text that is not UTF-8: the driver's decoding (and
    # its error) is the Python path's.
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE records SET key = CAST(X'ff61' AS TEXT) WHERE key = ?", (keys[1],))
    assert c.rows("train", _hashes(keys[:3])) is None
    assert len(c.rows("train", _hashes([keys[0], keys[2]]))) == 2
    # Closed: not handled; the lookup's get_many still answers through Python.
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE records SET key = ? WHERE key = CAST(X'ff61' AS TEXT)", (keys[1],))
    c.close()
    assert c.rows("train", _hashes(keys)) is None
    result = cat.get_many("train", keys)
    assert result.ok and [r.key for r in result] == keys


def test_a_forked_child_never_steps_the_parents_statement(cat, local_root):
    make_dataset(cat, local_root, 1)
    keys = shard_keys(0)
    parent = cat._lookup()._point_lookup
    assert parent.rows("train", _hashes(keys)) is not None

    def child() -> Any:
        inherited = parent.rows("train", _hashes(keys))
        return inherited, [r.key for r in cat.get_many("train", keys)]

    assert point_tests.in_forked_child(child) == (None, keys)
    assert len(parent.rows("train", _hashes(keys))) == len(keys)  # the parent's still serves


def test_batches_while_another_process_commits_and_deletes(sqlite_url, local_root):
    """Never a record older than the last commit before the batch began, never a staged one."""
    cat = Catalog(sqlite_url)
    try:
        hot, proc, published, removed, done = point_tests.start_churn(
            cat, sqlite_url, local_root, 15
        )
        lookup = cat._lookup()
        seen = dict.fromkeys(hot, 0)
        handled = batches = 0
        deadline = time.monotonic() + _TIMEOUT
        while time.monotonic() < deadline and batches < 20_000:
            finished = done.value
            floor, gone = published.value, removed.value
            asked = [*hot, f"staged/{floor}", "gone/1"]
            handled += lookup._point_lookup.rows("train", _hashes(asked)) is not None
            result = _by_key(cat.get_many("train", asked))
            for key in hot:
                g = int(result[key]["txt"].decode())
                assert g >= floor and g >= seen[key], (key, g, floor, seen[key])
                seen[key] = g
            assert result[f"staged/{floor}"] is None
            if gone:
                assert result["gone/1"] is None
            batches += 1
            if finished:
                break
        proc.join(_TIMEOUT)
        assert proc.exitcode == 0
        assert removed.value == 1 and published.value > 0
        assert handled == batches  # the compiled statement answered every batch
        assert cat.get_many("train", ["gone/1"]).missing == ["gone/1"]
        with pytest.raises(DatasetNotFoundError):
            cat.get_many("other", ["o/1"])
    finally:
        cat.close()
