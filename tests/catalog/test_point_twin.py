"""The Python twin of the compiled point lookup (reading/pypoint.py) against the compiled one.

Both run on the *same* lookup state (its connection, shard cache, open
descriptors, LRU mark): a hypothesis state machine interleaves lookups
with what changes that state (shards cached or not, files open or
closed, keys deleted, shards moved, records corrupted, a hash-only
dataset's rows given another key's hash: a collision) and checks after
each lookup that the compiled ``Point``, the twin with the compiled codec
and the twin with the reference codec give the same record, or all three
None ("not handled"). In the Python mode the twin serves file-backed
SQLite catalogs and hands what it does not handle to the Python path with
the rows it fetched; other catalogs (in memory, PostgreSQL) get a point
lookup that declines at once: no statement runs twice.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from shardcat.catalog import internal
from shardcat.errors import DatasetNotFoundError, KeyNotFoundError, ShardcatError
from shardcat.format import checksums, recordcodec, records
from shardcat.format.checksums import signed_key_hashes
from shardcat.format.spans import unpack_spans
from shardcat.format.tar import scan_tar
from shardcat.format.tar.read import tar_record as reference_tar_record
from shardcat.reading import Catalog, point, pypoint
from shardcat.storage.cache import ONE_PREAD
from shardcat.testing.collisions import colliding_key_hashes
from shardcat.testing.tars import wds_samples, write_wds_tar

from .helpers import QueryCounter, machine_settings, make_dataset, shard_keys, write_shard

compiled_only = pytest.mark.skipif(
    not point.available() or recordcodec.active() != "compiled",
    reason="the compiled point lookup is not available here",
)


def twin_of(lookup: Any, tar_record: Any) -> point.PyPoint:
    """A Python twin over ``lookup``'s own state, finishing tar samples with ``tar_record``."""
    raw = lookup.raw
    finish = point.TarFinisher(raw.query, raw.placeholder, lookup.layouts.get, tar_record)
    return point.PyPoint(
        raw,
        lookup.gate,
        lookup._record_by_shard,
        lookup._shards,
        lookup._fds,
        lookup._touch,
        unpack_spans,
        lookup._texts,
        ONE_PREAD,
        lookup._tars,
        finish,
        lookup._batch,
        hash_sql=lookup._record_by_shard_hash,
        hash_datasets=lookup.hash_datasets,
        hash_batch_sql=lookup._sql("batch_hashed", None)[0],
    )


def content(record: Any) -> Any:
    if record is None:
        return None
    entries = {n: (e.content_type, bytes(e.data)) for n, e in record.entries.items()}
    return record.key, record.offset, record.length, entries


def outcome(call: Any, *args: Any) -> Any:
    try:
        return content(call(*args))
    except ShardcatError as e:
        return ("error", type(e).__name__, str(e))


class Points:
    """The compiled point lookup of a catalog's lookup, and two twins over the same state."""

    def __init__(self, cat: Catalog) -> None:
        self.lookup = lookup = cat._lookup()
        self.compiled = lookup._point_lookup
        assert point.is_compiled(self.compiled)
        self.twin = twin_of(lookup, recordcodec.tar_record)
        self.reference = twin_of(lookup, reference_tar_record)

    def get(self, dataset: str, key: str) -> Any:
        """The three answers, checked equal; returns the compiled one's."""
        got = content(self.compiled.get(dataset, key, recordcodec.decode_spanned))
        twin = content(self.twin.get(dataset, key, recordcodec.decode_spanned))
        reference = content(self.reference.get(dataset, key, records.decode_spanned))
        assert twin == got, (dataset, key)
        assert reference == got, (dataset, key)
        return got

    def rows(self, dataset: str, keys: list[str]) -> None:
        """Both statements' rows (and the hashed one's, each ending with its key hash), checked equal."""
        hashes = signed_key_hashes(k.encode() for k in keys)
        for hashed in (False, True):
            got = self.compiled.rows(dataset, hashes, hashed)
            twin = self.twin.rows(dataset, hashes, hashed)
            assert got is not None and twin is not None
            assert sorted(map(tuple, got)) == sorted(map(tuple, twin)), (dataset, keys, hashed)


def _live(cat: Catalog, dataset: str, key: str) -> bool:
    try:
        cat.locate(dataset, key)
    except ShardcatError:  # missing; or a hash-only record whose head was flipped (read to locate)
        return False
    return True


MISSING = ["nope", "img/000/99999", "img/000/0000", "bad\udcff", ""]


class TwinModel(RuleBasedStateMachine):
    """Lookups and changes of state, in any order: the three answers always agree."""

    @initialize()
    def start(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        root = Path(self.tmp.name)
        (root / "shards").mkdir()
        (root / "tars").mkdir()
        self.cat = Catalog(f"sqlite:///{root / 'catalog.db'}")
        make_dataset(self.cat, str(root / "shards"), 2)
        tar = write_wds_tar(root / "tars" / "a.tar", n=12)
        self.cat.create_dataset("wds", str(root / "tars"))
        self.cat.register_shard("wds", scan_tar(tar))
        self.native = shard_keys(0, 10) + shard_keys(1, 10)
        self.tar_keys = [s["__key__"] for s in wds_samples(tar)]
        # A hash-only dataset: each candidate's record read, its key compared.
        (root / "hashed").mkdir()
        self.hashed = [f"h/{i:03d}" for i in range(12)]
        self.cat.create_dataset("h", str(root / "hashed"), keys="hash")
        self.cat.register_shard("h", write_shard(str(root / "hashed" / "h.shard"), self.hashed))
        self.points = Points(self.cat)
        self.moves = 0

    def teardown(self) -> None:
        if hasattr(self, "cat"):
            self.cat.close()
            self.tmp.cleanup()

    def _dataset(self, key: str) -> str:
        if key.startswith("h/"):
            return "h"
        return "wds" if key in self.tar_keys else "train"

    @rule(data=st.data())
    def lookup(self, data: st.DataObject) -> None:
        keys = data.draw(
            st.lists(
                st.sampled_from(self.native + self.tar_keys + self.hashed + MISSING),
                min_size=1,
                max_size=6,
            )
        )
        for key in keys:
            self.points.get(self._dataset(key), key)

    @rule(data=st.data())
    def warm(self, data: st.DataObject) -> None:
        """The Python path: caches the dataset's shards, opens the file; its answer is the same."""
        key = data.draw(st.sampled_from(self.native + self.tar_keys + self.hashed))
        dataset = self._dataset(key)
        expected = outcome(self.points.lookup.get, dataset, key)
        got = self.points.get(dataset, key)
        assert got is None or got == expected, key
        # Others of the same dataset: most in the file just opened.
        others = st.sampled_from(self.native + self.tar_keys + self.hashed + ["h/nope"])
        for other in data.draw(st.lists(others, max_size=6)):
            if self._dataset(other) == dataset:
                self.points.get(dataset, other)

    @rule(dataset=st.sampled_from(["train", "wds", "h"]))
    def sweep(self, dataset: str) -> None:
        """Every key of a dataset, each after the Python path's answer (which opens its file)."""
        keys = {"train": self.native, "wds": self.tar_keys, "h": self.hashed}[dataset]
        for key in keys:
            expected = outcome(self.points.lookup.get, dataset, key)
            got = self.points.get(dataset, key)
            assert got is None or got == expected, key

    @rule(data=st.data())
    def forget_file(self, data: st.DataObject) -> None:
        """A shard's file closed (the LRU, or a failed read): not handled until reopened."""
        fds = self.points.lookup._fds
        if fds:
            self.points.lookup._sources.forget(data.draw(st.sampled_from(sorted(fds))))

    @rule()
    def forget_shards(self) -> None:
        """The shard cache emptied: not handled until the Python path loads it again."""
        self.points.lookup._shards.clear()

    @rule()
    def forget_layouts(self) -> None:
        """The twins' tar layouts forgotten: asked of the catalog again."""
        self.points.twin._finish.specs.clear()
        self.points.reference._finish.specs.clear()

    @rule(data=st.data())
    def delete_key(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(self.native))
        if _live(self.cat, "train", key):
            self.cat.delete_keys("train", [key])

    @rule()
    def move_shards(self) -> None:
        """Every native shard copied to a new folder, the catalog moved, the old files deleted."""
        self.moves += 1
        new_root = os.path.join(self.tmp.name, f"moved-{self.moves}")
        os.mkdir(new_root)
        rows = self.cat.shards("train")
        moves = {}
        for row in rows:
            new_path = os.path.join(new_root, os.path.basename(row.url))
            shutil.copyfile(row.url, new_path)
            moves[row.url] = (new_path, row.file_id)
        internal.move_shards(
            self.cat,
            "train",
            moves,
            expected_version=self.cat.info("train").version,
            root_url=new_root,
        )
        for row in rows:
            os.remove(row.url)

    @rule(data=st.data())
    def collide(self, data: st.DataObject) -> None:
        """A hash-only row given another key's hash: that key has one candidate more.

        The row's own key is then found by neither (its hash names no row of its own).
        """
        key, other = data.draw(st.lists(st.sampled_from(self.hashed), min_size=2, max_size=2))
        with self.cat.engine.begin() as conn:
            conn.exec_driver_sql(
                "UPDATE records SET key_hash = ? WHERE key_hash = ? AND key IS NULL",
                (
                    checksums.signed_key_hash(key.encode()),
                    checksums.signed_key_hash(other.encode()),
                ),
            )

    @rule(data=st.data())
    def corrupt(self, data: st.DataObject) -> None:
        """A byte of a live record flipped after registration: neither may return it."""
        key = data.draw(st.sampled_from(self.native + self.tar_keys + self.hashed))
        dataset = self._dataset(key)
        if not _live(self.cat, dataset, key):
            return
        loc = self.cat.locate(dataset, key)
        at = loc.offset + data.draw(st.integers(0, loc.length - 1))
        with open(loc.url, "r+b") as f:
            f.seek(at)
            byte = f.read(1)
            f.seek(at)
            f.write(bytes([byte[0] ^ 0x5A]))

    @rule(data=st.data())
    def batch(self, data: st.DataObject) -> None:
        keys = data.draw(st.lists(st.sampled_from(self.native + MISSING[:3]), max_size=12))
        self.points.rows("train", keys)
        self.points.rows("wds", self.tar_keys[:5])

    @invariant()
    def open_and_unbusy(self) -> None:
        if hasattr(self, "points"):
            assert not self.points.compiled.closed and not self.points.twin.closed
            assert self.points.compiled.busy == 0 and self.points.twin.busy == 0


TwinModel.TestCase.settings = machine_settings("SHARDCAT_POINT_TWIN_EXAMPLES", 15, 30)
test_twin_and_compiled_point_lookups_agree = compiled_only(TwinModel.TestCase)


# --- the cases one by one ------------------------------------------------------


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'catalog.db'}"


@compiled_only
def test_each_case_is_handled_by_both_or_by_neither(sqlite_url: str, local_root: str) -> None:
    with Catalog(sqlite_url) as cat:
        (info, _) = make_dataset(cat, local_root, 2)
        tar = write_wds_tar(Path(local_root) / "a.tar", n=8)
        cat.create_dataset("wds", local_root)
        cat.register_shard("wds", scan_tar(tar))
        tar_key = wds_samples(tar)[3]["__key__"]
        points = Points(cat)
        key, other = shard_keys(0)[5], shard_keys(1)[5]
        # Nothing cached or open yet; then the dataset's shards cached, one file open.
        assert points.get("train", key) is None
        cat._lookup().get("train", key)
        assert points.get("train", key) is not None
        assert points.get("train", other) is None  # its file is not open yet
        assert points.get("train", "nope") is None
        assert points.get("train", "bad\udcff") is None
        assert points.get("other", key) is None
        # A tar sample: its own shard and layout.
        assert points.get("wds", tar_key) is None
        cat._lookup().get("wds", tar_key)
        assert points.get("wds", tar_key) is not None
        # A deleted key; a closed file; a moved shard (the cached descriptor's
        # file has no name left) until the Python path finds its new place.
        cat.delete_keys("train", [shard_keys(0)[6]])
        assert points.get("train", shard_keys(0)[6]) is None
        cat._lookup()._sources.forget(info.path)
        assert points.get("train", key) is None
        cat._lookup().get("train", key)
        new_root = os.path.join(local_root, "moved")
        os.mkdir(new_root)
        new_path = os.path.join(new_root, os.path.basename(info.path))
        shutil.copyfile(info.path, new_path)
        row = next(r for r in cat.shards("train") if r.url == info.path)
        internal.move_shards(
            cat,
            "train",
            {row.url: (new_path, row.file_id)},
            expected_version=cat.info("train").version,
            root_url=new_root,
        )
        os.remove(info.path)
        assert points.get("train", key) is None
        cat._lookup().get("train", key)
        assert points.get("train", key) is not None
        # Arguments the compiled one turns away.
        assert points.twin.get("train", 7, recordcodec.decode_spanned) is None  # type: ignore[arg-type]
        assert points.twin.rows("train", (1, 2)) is None  # type: ignore[arg-type]
        # Closed: neither answers.
        points.twin.close()
        assert points.twin.closed
        assert points.twin.get("train", key, recordcodec.decode_spanned) is None
        assert points.twin.rows("train", [1]) is None


@compiled_only
@pytest.mark.parametrize("bits", [2, 3, 64])
def test_hash_only_datasets_with_forced_collisions_are_handled_alike(
    sqlite_url: str, local_root: str, bits: int
) -> None:
    """A hash-only dataset (keys="hash"): each candidate's record is read and its key compared.

    The key hash narrowed to ``bits`` bits (64: not narrowed) for Python and
    the compiled lookup alike: 4 or 8 hashes for 30 keys, so every lookup
    has several candidates, and each key must still get its own record (a
    hash with more candidates than ``MAX_ROWS`` is the Python path's); a key
    not in the dataset, whose hash other keys have, is found by neither.
    """
    hook = colliding_key_hashes(bits) if bits < 64 else contextlib.nullcontext()
    with hook, Catalog(sqlite_url) as cat:
        cat.create_dataset("h", local_root, keys="hash")
        for i in range(3):
            cat.register_shard("h", write_shard(f"{local_root}/h-{i}.shard", shard_keys(i, 10)))
        keys = shard_keys(0, 10) + shard_keys(1, 10) + shard_keys(2, 10)
        # Candidates per hash, with the hash the lookups use (narrowed inside the hook).
        per_hash = Counter(checksums.signed_key_hash(k.encode()) for k in keys)
        points = Points(cat)
        lookup = points.lookup
        # Not yet known hash-only: the keyed statement finds no row, in both.
        assert points.get("h", keys[0]) is None
        assert lookup.get("h", keys[0]).key == keys[0]  # the Python path finds it hash-only
        assert lookup.hash_datasets == {"h"}
        handled = 0
        for key in keys:  # each shard's file opened by the Python path, then both read it
            expected = content(lookup.get("h", key))
            got = points.get("h", key)
            if per_hash[checksums.signed_key_hash(key.encode())] > pypoint.MAX_ROWS:
                assert got is None, key
            else:
                assert got is not None and got == expected, key
                handled += 1
        assert handled >= len(keys) // 2
        if bits < 64:  # the candidates really are several: the comparison is not vacuous
            assert max(per_hash.values()) > 1
        absent = ["nope", "img/000/99999", "img/001/0000", ""]
        for key in absent:
            assert points.get("h", key) is None
            with pytest.raises(KeyNotFoundError):
                cat.get("h", key)
        # Catalog.get takes the compiled path where it handles the key: one statement
        # each (the hash-only one, on its own connection), none of the Python path's.
        small = [k for k in keys if per_hash[checksums.signed_key_hash(k.encode())] <= 8]
        with QueryCounter(cat) as q:
            assert [cat.get("h", k).key for k in small] == small
        assert q.statements == [lookup._record_by_shard_hash] * len(small)


@pytest.fixture(params=["sqlite-python", "sqlite-memory", "postgresql"])
def python_catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Catalog]:
    """A catalog without the compiled lookup: the switch off, in memory, PostgreSQL."""
    if request.param == "sqlite-python":
        url = f"sqlite:///{tmp_path / 'catalog.db'}"
    elif request.param == "sqlite-memory":
        url = "sqlite://"
    else:
        url = str(request.getfixturevalue("postgres_url"))
    previous = point.use("python") if request.param == "sqlite-python" else None
    try:
        cat = Catalog(url)
        cat._lookup()  # opened now: it follows the switch
    finally:
        if previous is not None:
            point.use(previous)
    with cat:
        yield cat


def _statements(cat: Catalog, call: Any) -> int:
    """Statements ``call()`` sends (its ShardcatError kept)."""
    with QueryCounter(cat) as q, contextlib.suppress(ShardcatError):
        call()
    return q.count


def test_the_twin_runs_in_the_python_mode_and_never_runs_the_statement_twice(
    python_catalog: Catalog, local_root: str
) -> None:
    """The twin where the compiled lookup would run; a declining one elsewhere (no statement)."""
    cat = python_catalog
    point_lookup = cat._lookup()._point_lookup
    file_backed = cat.url.startswith("sqlite:///")
    assert type(point_lookup) is (point.PyPoint if file_backed else point.NoPoint)
    make_dataset(cat, local_root, 2)
    keys = shard_keys(0) + shard_keys(1)
    first = [cat.get("train", keys[0])]  # the shards cached, the first file open
    # A key in the file not open yet, a hit: the point statement alone. A
    # missing key: it, then the error path's own queries (its hints).
    assert _statements(cat, lambda: first.append(cat.get("train", keys[-1]))) == 1
    assert _statements(cat, lambda: first.append(cat.get("train", keys[1]))) == 1
    hints = _statements(cat, lambda: cat._lookup()._missing("train", "nope"))
    assert _statements(cat, lambda: cat.get("train", "nope")) == 1 + hints
    with pytest.raises(KeyNotFoundError):
        cat.get("train", "nope")
    with pytest.raises(DatasetNotFoundError):
        cat.get("no-such", keys[0])
    again = [cat.get("train", k) for k in (keys[0], keys[-1], keys[1])]
    assert [content(r) for r in again] == [content(r) for r in first]
    direct = point_lookup.get("train", keys[1], recordcodec.decode_spanned)
    if file_backed:  # the twin itself: the same record as the Python path
        assert content(direct) == content(first[2])
    else:  # declines at once, running nothing
        with QueryCounter(cat) as q:
            assert direct is None
            assert point_lookup.get("train", keys[1], recordcodec.decode_spanned) is None
            assert point_lookup.rows("train", [1, 2]) is None
        assert q.count == 0, q.statements[:3]
    batch = cat.get_many("train", [*keys, "nope"])
    assert batch.missing == ["nope"]
    assert [r.key for r in batch.records[:-1]] == keys
    cat.delete_keys("train", [keys[0]])
    with pytest.raises(ShardcatError, match="deleted it"):
        cat.get("train", keys[0])
    lookup = cat._lookup()
    cat.close()
    assert lookup._point_lookup.closed
    assert lookup.fast_get("train", keys[1], recordcodec.decode_spanned) is None
