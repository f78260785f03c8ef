"""Hash-only datasets (``keys="hash"``): no key text in the catalog, every lookup still exact.

Each test runs on SQLite and PostgreSQL (``catalog_url``). The collision tests
narrow the key hash to a few bits (:func:`shardcat.testing.collisions.colliding_key_hashes`),
so that most keys share their hash with others: what a 64-bit hash does about once
in 5.85 billion keys happens here on every lookup.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardcat import KeyNotFoundError, KeyTextUnavailableError
from shardcat.errors import DatasetExistsError, DuplicateKeyError
from shardcat.reading import Catalog
from shardcat.testing.collisions import colliding_key_hashes

from .helpers import keyed_dataset, sample, shard_keys, write_shard


def _hash_dataset(cat: Catalog, root: str, shards: int = 2, name: str = "h") -> list[Any]:
    return keyed_dataset(cat, root, name, "hash", shards)


def _rows(cat: Catalog, dataset: str) -> tuple[int, int]:
    with cat.engine.connect() as conn:
        return tuple(  # type: ignore[return-value]
            conn.execute(
                sa.text(
                    "SELECT count(*), count(r.key) FROM records r JOIN datasets d "
                    "ON d.id = r.dataset_id WHERE d.name = :n"
                ),
                {"n": dataset},
            ).one()
        )


def _offsets(infos: list[Any]) -> dict[str, tuple[str, int, int]]:
    """Each key's (shard path, offset, length) as the shards' footers say."""
    out = {}
    for info in infos:
        for key, row in zip(info.keys, info.records):
            out[key] = (info.path, int(row["offset"]), int(row["length"]))
    return out


def test_registration_keeps_no_key_text_and_lookups_read_the_shards(cat, local_root):
    infos = _hash_dataset(cat, local_root)
    assert cat.info("h").keys == "hash"
    assert _rows(cat, "h") == (80, 0)  # 80 rows, no key text
    where = _offsets(infos)
    for key in shard_keys(0)[:5] + shard_keys(1)[-5:]:
        record = cat.get("h", key)
        assert record.key == key
        assert record.entries["txt"].data == sample(key)["txt"].encode()
        loc = cat.locate("h", key)
        assert (loc.url, loc.offset, loc.length) == where[key]
        assert sorted(cat.get("h", key, entries=["txt"]).entries) == ["txt"]
        assert {e.name for e in cat.describe("h", key)} == {"jpg", "json", "txt"}
    batch = cat.get_many("h", [*shard_keys(1), "absent", shard_keys(0)[7]])
    assert [r.key for r in batch.records if r is not None] == [*shard_keys(1), shard_keys(0)[7]]
    assert batch.missing == ["absent"]
    with pytest.raises(KeyNotFoundError, match="absent"):
        cat.get("h", "absent")
    with pytest.raises(KeyNotFoundError):
        cat.locate("h", "absent")
    # At a kept version as well (the versioned statements have their hash-only twins).
    assert cat.get("h", shard_keys(0)[0], version=1).key == shard_keys(0)[0]


def test_a_dataset_with_key_text_is_unchanged(cat, local_root):
    cat.create_dataset("t", local_root)
    cat.register_shard("t", write_shard(f"{local_root}/t.shard", shard_keys(0)))
    assert cat.info("t").keys == "text"
    assert _rows(cat, "t") == (40, 40)
    assert list(cat.keys("t", limit=2)) == shard_keys(0)[:2]


def test_create_checks_the_mode_and_exist_ok_the_same_mode(cat, local_root):
    with pytest.raises(ValueError, match="keys must be one of"):
        cat.create_dataset("x", local_root, keys="none")
    cat.create_dataset("h", local_root, keys="hash")
    assert cat.create_dataset("h", local_root, keys="hash", exist_ok=True).keys == "hash"
    with pytest.raises(DatasetExistsError, match="keys='hash'"):
        cat.create_dataset("h", local_root, exist_ok=True)


def test_operations_that_need_key_text_say_so(cat, local_root):
    _hash_dataset(cat, local_root, shards=1)
    for call in (
        lambda: list(cat.keys("h")),
        lambda: cat.count("h", prefix="img/"),
        lambda: cat.select("h", "key LIKE 'img/%'"),
        lambda: cat.diff("h", 1, 1),
        lambda: cat.delete_keys("h", [shard_keys(0)[0]]),
    ):
        with pytest.raises(KeyTextUnavailableError, match='created with keys="hash"') as e:
            call()
        assert "shardcat.copy_dataset" in str(e.value)  # what to do
    assert cat.count("h") == 40  # a count needs no key text
    # Column groups and rewrites match records by key text: their commits are refused, and
    # the job stays open (nothing changed).
    from shardcat.catalog.groups import GroupWrite

    job = cat.begin_job("h")
    info = write_shard(f"{local_root}/g.shard", shard_keys(0)[:2], make=lambda k: {"g": k})
    cat.register_shard("h", info, job=job)
    for kw in ({"group": GroupWrite("captions")}, {"rewrite": True}):
        with pytest.raises(KeyTextUnavailableError, match='created with keys="hash"'):
            cat.commit_job(job, **kw)
    assert cat.job(job).state == "open"
    assert cat.info("h").version == 1


def test_verify_compares_hashes_and_positions(cat, local_root):
    infos = _hash_dataset(cat, local_root)
    assert cat.verify("h", history=False).problems == []
    # A row moved to another record's offset: its hash no longer matches the footer's there.
    with cat.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE records SET key_hash = key_hash + 1 WHERE shard_id = "
                "(SELECT min(id) FROM shards) AND byte_offset = :o"
            ),
            {"o": int(infos[0].records["offset"][3])},
        )
    problems = cat.verify("h", history=False).problems
    kinds = {p.kind for p in problems}
    assert kinds == {"row-not-in-footer", "record-not-in-catalog"}
    assert all(shard_keys(0)[3] in p.keys for p in problems)


# --- forced collisions ------------------------------------------------------------------


def test_lookups_stay_exact_under_forced_collisions(cat, local_root):
    with colliding_key_hashes(bits=2) as mask:  # 4 hashes for 120 keys: ~30 keys per hash
        infos = _hash_dataset(cat, local_root, shards=3)
        where = _offsets(infos)
        keys = [k for i in range(3) for k in shard_keys(i)]
        with cat.engine.connect() as conn:
            hashes = conn.execute(sa.text("SELECT DISTINCT key_hash FROM records")).scalars()
            assert set(hashes) <= set(range(mask + 1))  # every row collides with many
        for key in keys:
            assert cat.get("h", key).key == key
            loc = cat.locate("h", key)
            assert (loc.url, loc.offset, loc.length) == where[key]
        absent = [f"absent/{i}" for i in range(20)]  # their hashes are taken by other keys
        shuffled = random.Random(7).sample(keys + absent, len(keys) + len(absent))
        batch = cat.get_many("h", shuffled)
        assert [None if r is None else r.key for r in batch.records] == [
            None if k in absent else k for k in shuffled
        ]
        assert sorted(batch.missing) == sorted(absent)
        for key in absent[:3]:
            with pytest.raises(KeyNotFoundError):
                cat.get("h", key)
            with pytest.raises(KeyNotFoundError):
                cat.locate("h", key)
        assert cat.verify("h", history=False).problems == []


def test_commit_duplicate_check_stays_exact_under_forced_collisions(cat, local_root):
    with colliding_key_hashes(bits=2):
        _hash_dataset(cat, local_root, shards=2)
        # New keys whose hashes all collide with live ones: no duplicates, the commit goes through.
        fresh = [f"new/{i}" for i in range(30)]
        cat.register_shard("h", write_shard(f"{local_root}/fresh.shard", fresh))
        assert cat.get("h", fresh[0]).key == fresh[0]
        # One real duplicate among colliding keys: exactly it is named.
        dup = shard_keys(1)[5]
        more = [f"more/{i}" for i in range(10)]
        with pytest.raises(DuplicateKeyError) as e:
            cat.register_shard("h", write_shard(f"{local_root}/dup.shard", [*more, dup]))
        assert e.value.keys == [dup]
        # Two shards of one job with colliding, distinct keys: fine; with a shared key: named.
        job = cat.begin_job("h")
        cat.register_shard("h", write_shard(f"{local_root}/a.shard", ["a/1", "a/2"]), job=job)
        cat.register_shard("h", write_shard(f"{local_root}/b.shard", ["b/1", "b/2"]), job=job)
        cat.commit_job(job)
        job = cat.begin_job("h")
        cat.register_shard("h", write_shard(f"{local_root}/c.shard", ["c/1", "c/2"]), job=job)
        cat.register_shard("h", write_shard(f"{local_root}/d.shard", ["d/1", "c/2"]), job=job)
        with pytest.raises(DuplicateKeyError, match="within the job") as e:
            cat.commit_job(job)
        assert e.value.keys == ["c/2"]


@pytest.mark.parametrize("on_duplicate", ["replace", "skip"])
def test_replace_and_skip_touch_only_the_duplicate_under_collisions(cat, local_root, on_duplicate):
    with colliding_key_hashes(bits=2):
        _hash_dataset(cat, local_root, shards=1)
        dup = shard_keys(0)[9]
        before = {k: cat.get("h", k).entries["jpg"].data for k in shard_keys(0)}
        newer = {dup: {"jpg": b"new bytes"}, "other/1": {"jpg": b"o1"}}
        job = cat.begin_job("h")
        info = write_shard(f"{local_root}/n.shard", list(newer), make=lambda k: newer[k])
        cat.register_shard("h", info, job=job)
        cat.commit_job(job, on_duplicate=on_duplicate)
        expect = dict(before, **{"other/1": b"o1"})
        if on_duplicate == "replace":
            expect[dup] = b"new bytes"
        got = cat.get_many("h", list(expect))
        assert {r.key: r.entries["jpg"].data for r in got.records} == expect
        assert cat.count("h") == 41


_CHARS = st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\x00")


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    keys=st.lists(
        # No NUL: PostgreSQL refuses it in any text it is sent (the point statement sends the key).
        st.text(_CHARS, min_size=1, max_size=8),
        min_size=1,
        max_size=25,
        unique=True,
    ),
    probes=st.lists(st.text(_CHARS, min_size=1, max_size=8), max_size=10),
    bits=st.integers(1, 4),
)
def test_property_hash_only_lookups_match_a_dict(catalog_url, tmp_path_factory, keys, probes, bits):
    """Whatever the keys and however narrow the hash: get_many and get agree with a dict."""
    root = str(tmp_path_factory.mktemp("prop"))
    model = {k: f"v:{k}".encode() for k in keys}
    with colliding_key_hashes(bits=bits), Catalog(catalog_url) as cat:
        name = f"p{uuid.uuid4().hex[:12]}"
        cat.create_dataset(name, root, keys="hash")
        cat.register_shard(
            name, write_shard(f"{root}/s.shard", keys, make=lambda k: {"v": model[k]})
        )
        asked = keys + [p for p in probes if p not in model]
        # The first batch meets the dataset (keys read, then records); the second takes
        # the one-round path of a met hash-only dataset (Lookup._many_hashed).
        for _ in range(2):
            batch = cat.get_many(name, asked)
            assert [None if r is None else r.entries["v"].data for r in batch.records] == [
                model.get(k) for k in asked
            ]
        for k in asked[:5]:
            if k in model:
                assert cat.get(name, k).entries["v"].data == model[k]
            else:
                with pytest.raises(KeyNotFoundError):
                    cat.get(name, k)
        cat.delete_dataset(name)


def test_reading_a_version_reads_keys_from_the_shards(cat, local_root):
    """shardcat.read needs no key text: a version's records come with the keys their shards hold."""
    import shardcat

    _hash_dataset(cat, local_root)
    old = shard_keys(0)[0]
    job = cat.begin_job("h")
    newer = write_shard(f"{local_root}/n.shard", [old], make=lambda k: {"txt": "new"})
    cat.register_shard("h", newer, job=job)
    cat.commit_job(job, on_duplicate="replace")
    records = shardcat.read(cat, "h").compute(scheduler="sync")
    assert sorted(r["__key__"] for r in records) == sorted(shard_keys(0) + shard_keys(1))
    assert [r["txt"] for r in records if r["__key__"] == old] == ["new"]
    at_two = shardcat.read(cat, "h", version=2).compute(scheduler="sync")
    assert [r["txt"] for r in at_two if r["__key__"] == old] == [f"text of {old}"]


def test_replace_conflicts_are_exact_under_collisions(cat, local_root):
    """A key another commit changed since the job began is a conflict; a colliding key is not."""
    from shardcat.errors import KeyConflictError
    from shardcat.format import checksums

    with colliding_key_hashes(bits=2):
        _hash_dataset(cat, local_root, shards=1)
        changed = shard_keys(0)[4]
        same_hash = next(
            k
            for k in shard_keys(0)
            if k != changed
            and checksums.signed_key_hash(k.encode()) == checksums.signed_key_hash(changed.encode())
        )
        slow, slow2 = cat.begin_job("h"), cat.begin_job("h")
        fast = cat.begin_job("h")
        cat.register_shard("h", write_shard(f"{local_root}/f.shard", [changed]), job=fast)
        cat.commit_job(fast, on_duplicate="replace")
        cat.register_shard("h", write_shard(f"{local_root}/s.shard", [changed, "x/1"]), job=slow)
        with pytest.raises(KeyConflictError) as e:
            cat.commit_job(slow, on_duplicate="replace")
        assert e.value.keys == [changed]
        # The other key of that hash was not changed: replacing it goes through.
        cat.register_shard("h", write_shard(f"{local_root}/t.shard", [same_hash]), job=slow2)
        cat.commit_job(slow2, on_duplicate="replace")
        assert cat.locate("h", same_hash).url.endswith("t.shard")
        assert cat.locate("h", changed).url.endswith("f.shard")


def test_a_catalog_without_the_reading_layer_refuses_to_guess(catalog_url, local_root):
    """SqlCatalog reads no shard: equal hashes at commit are refused, not taken for duplicates."""
    from shardcat.catalog.catalog import SqlCatalog

    with Catalog(catalog_url) as cat:
        _hash_dataset(cat, local_root, shards=1)
    bare = SqlCatalog(catalog_url)
    try:
        fresh = write_shard(f"{local_root}/fresh.shard", ["fresh/1"])
        bare.register_shard("h", fresh)  # no equal hash: nothing to read, the commit goes through
        again = write_shard(f"{local_root}/again.shard", [shard_keys(0)[1]])
        with pytest.raises(KeyTextUnavailableError, match="opened without a reader"):
            bare.register_shard("h", again)
    finally:
        bare.close()


def test_keys_longer_than_the_head_read_are_read_whole(cat, local_root):
    """A key past the first 512 bytes of its record takes a second read; still exact."""
    cat.create_dataset("h", local_root, keys="hash")
    long_keys = [("k" * 700) + str(i) for i in range(3)] + ["short"]
    cat.register_shard("h", write_shard(f"{local_root}/long.shard", long_keys))
    for key in long_keys:
        assert cat.get("h", key).key == key
    batch = cat.get_many("h", [*long_keys, "k" * 701])
    assert [None if r is None else r.key for r in batch.records] == [*long_keys, None]
    # Heads read beside the entries (a key given by its hash, checked) and heads read first
    # (two keys of one hash under a 1-bit hash): each long key's whole head read once more.
    batch = cat.get_many("h", [*long_keys, "k" * 701], entries=["txt"])
    assert [r["txt"].decode() if r else None for r in batch.records] == [
        *(sample(k)["txt"] for k in long_keys),
        None,
    ]
    described = cat.describe_many("h", long_keys, want=lambda info: info.name == "txt")
    assert sorted(described.records) == sorted(long_keys) and not described.errors
    with colliding_key_hashes(bits=1):
        cat.create_dataset("h1", local_root + "/h1", keys="hash")
        cat.register_shard("h1", write_shard(f"{local_root}/h1/long.shard", long_keys))
        for entries in (None, ["txt"]):
            batch = cat.get_many("h1", [*long_keys, "k" * 701], entries=entries)
            assert [None if r is None else r.key for r in batch.records] == [*long_keys, None]


def test_keys_holding_nul_are_found_by_hash_on_every_database(cat, local_root):
    """PostgreSQL binds no NUL in text; a hash-only dataset never sends its keys' text.

    Every lookup of such a key (the latest-version point path included, which
    first tries the key-text statement) finds it. In a dataset with key text on
    PostgreSQL such a key is refused (``InvalidNameError``), as its writes are.
    """
    cat.create_dataset("h", local_root, keys="hash")
    keys = ["a\x00b", "\x00", "ab", "a\x00"]
    cat.register_shard("h", write_shard(f"{local_root}/nul.shard", keys))
    for key in keys:
        assert cat.get("h", key).key == key
        assert cat.get("h", key, version=1).key == key
        assert sorted(cat.get("h", key, entries=["txt"]).entries) == ["txt"]
        assert cat.locate("h", key).length > 0
    batch = cat.get_many("h", [*keys, "a\x00c"])
    assert [None if r is None else r.key for r in batch.records] == [*keys, None]
    with pytest.raises(KeyNotFoundError):
        cat.get("h", "a\x00c")
    cat.create_dataset("t", f"{local_root}/t")
    cat.register_shard("t", write_shard(f"{local_root}/t/plain.shard", ["ab"]))
    from shardcat.errors import InvalidNameError

    pg = cat.engine.dialect.name == "postgresql"
    for lookup in (cat.get, cat.locate, cat.describe):
        # With key text, PostgreSQL can hold no such key: refused, typed, as its writes are.
        with pytest.raises(
            InvalidNameError if pg else KeyNotFoundError, match="NUL" if pg else "a"
        ):
            lookup("t", "a\x00b")
    assert cat.get_many("t", ["a\x00b", "ab"]).missing == ["a\x00b"]


def test_a_key_changed_in_its_shard_stops_the_commit_not_passes_as_a_collision(cat, local_root):
    from shardcat.errors import ChecksumError
    from shardcat.format.records import key_span

    infos = _hash_dataset(cat, local_root, shards=1)
    key = shard_keys(0)[3]
    path, offset, length = _offsets(infos)[key]
    with open(path, "r+b") as f:  # one byte of the live record's key changes (its head CRC not)
        f.seek(offset)
        head = f.read(length)
        start, _ = key_span(head, path=path, offset=offset)
        f.seek(offset + start)
        f.write(bytes([head[start] ^ 0x01]))
    # The same key again: equal hashes, and the live record's key now reads otherwise. Read
    # unchecked, that looked like two keys sharing a hash and the duplicate was committed.
    with pytest.raises(ChecksumError, match="head CRC32C"):
        cat.register_shard("h", write_shard(f"{local_root}/again.shard", [key]))
    assert cat.count("h") == len(shard_keys(0))


def test_forced_collisions_reach_modules_first_imported_inside_the_block():
    """A fresh interpreter: the writer and the lookup are loaded lazily (by the first write or
    lookup), so the hook must narrow them too, or a shard written inside the block keeps its
    real hash and a lookup that narrows it finds nothing (the tests above, run first, failed)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from shardcat.testing.collisions import colliding_key_hashes\n"
        "assert 'shardcat.format.writer' not in sys.modules\n"
        "with colliding_key_hashes(bits=2):\n"
        "    from shardcat.format import writer\n"
        "    from shardcat.reading import lookup\n"
        "    assert writer.key_hash(b'some key') < 4, writer.key_hash(b'some key')\n"
        "    assert lookup.signed_key_hash(b'some key') < 4\n"
        "from shardcat.format import writer\n"
        "assert writer.key_hash(b'some key') >= 4\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_lookup_that_met_a_hash_only_dataset_asks_its_candidates_first(cat, local_root):
    """docs/CATALOG.md: once a lookup has met a hash-only dataset it asks the hash-only twin
    first: one statement for ``get(entries=)`` and ``locate`` too, not a miss of key text,
    the dataset's row and then the twin."""
    from .helpers import QueryCounter

    _hash_dataset(cat, local_root, shards=1)
    keys = shard_keys(0)
    cat.get("h", keys[0])  # met: the lookup knows the dataset is hash-only
    with QueryCounter(cat) as queries:
        rec = cat.get("h", keys[1], entries=["jpg"])
    assert rec.key == keys[1] and list(rec) == ["jpg"]
    assert len(queries.statements) == 1, queries.statements
    with QueryCounter(cat) as queries:
        assert cat.locate("h", keys[2]).offset >= 0
    assert len(queries.statements) == 1, queries.statements
    with pytest.raises(KeyNotFoundError):
        cat.locate("h", "absent")
