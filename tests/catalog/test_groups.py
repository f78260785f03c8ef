"""Column groups in the catalog (docs/GROUPS.md): one query returns every group's row.

Groups are committed here without Dask (a job, its staged shard, ``commit_job(group=)``),
on SQLite and PostgreSQL: the compiled point path keeps serving keys without groups and
declines keys with several rows, which the Python path (and its twin) merges.
"""

from __future__ import annotations

from typing import Any

import pytest

from shardcat.catalog.groups import SKIPPED_KEYS, GroupWrite
from shardcat.errors import DuplicateKeyError, EntryExistsError, KeyNotFoundError
from shardcat.format import recordcodec
from shardcat.reading import Catalog, point, pypoint

from .helpers import (
    PointReadCounter,
    QueryCounter,
    ReadCounter,
    make_dataset,
    shard_keys,
    write_shard,
)


def caption(key: str) -> dict[str, Any]:
    return {"cap.txt": f"caption of {key}"}


def add_group(
    cat: Catalog, root: str, keys: list[str], name: str = "captions", number: int = 0, **kw: Any
) -> int:
    """Stage one shard of ``keys``' entries in a job and commit it as the group ``name``."""
    make = kw.pop("make", caption)
    job = cat.begin_job("train")
    info = write_shard(f"{root}/{name}-{number}.shard", keys, make=make)
    cat.register_shard("train", info, job=job)
    try:
        cat.commit_job(job, group=GroupWrite(name, **kw))
    except Exception:
        cat.abort_job(job)  # its shard's row goes: the file name may be used again
        raise
    return cat.info("train").version


@pytest.fixture
def cat(catalog_url: str):
    with Catalog(catalog_url) as c:
        yield c


def test_one_query_returns_every_groups_row_and_reads_merge_them(cat, local_root, monkeypatch):
    point_reads = PointReadCounter(monkeypatch)  # whole records: compiled, twin or Python path
    make_dataset(cat, local_root, 2)
    before = cat.info("train").version
    keys = shard_keys(0)
    after = add_group(cat, local_root, keys[:10])
    key = keys[3]
    cat.get("train", keys[0])  # warm: both shards open
    reads = ReadCounter(monkeypatch)
    with QueryCounter(cat) as queries:
        rec = cat.get("train", key, entries=["cap.txt"])
    assert list(rec) == ["cap.txt"] and rec["cap.txt"].decode() == f"caption of {key}"
    assert queries.count == 1 and len(reads.reads) == 1  # only the group that holds it is read
    point_reads.reads.clear()
    with QueryCounter(cat) as queries:
        cat.get("train", key)
    # One statement (the compiled one's counted when it answers) and one read per group.
    assert queries.count == 1 and len(point_reads.reads) == 2
    assert point_reads.reads[0] != point_reads.reads[1]  # the base's shard and the group's
    with QueryCounter(cat) as queries:
        whole = cat.get("train", key)
    assert queries.count == 1
    assert list(whole) == ["jpg", "json", "txt", "cap.txt"]
    assert list(cat.get("train", key, version=before)) == ["jpg", "json", "txt"]
    assert list(cat.get("train", key, version=after)) == ["jpg", "json", "txt", "cap.txt"]
    assert list(cat.get("train", keys[20])) == ["jpg", "json", "txt"]  # no caption: base only
    got = cat.get_many("train", keys)
    assert got.ok
    assert [("cap.txt" in r) for r in got.records] == [True] * 10 + [False] * 30
    assert got.records[3] == whole
    assert cat.get_many("train", keys[:10], version=before).records[3] == cat.get(
        "train", key, version=before
    )
    described = cat.describe_many("train", keys[:4], want=lambda info: info.name == "cap.txt")
    assert [e.name for e in described.described[key]] == ["jpg", "json", "txt", "cap.txt"]
    assert list(described.records[key]) == ["cap.txt"]
    # The keys, the count and the versions' samples are the base's.
    assert cat.count("train") == 80
    assert len(list(cat.keys("train"))) == 80


def test_the_duplicate_rule_is_per_group(cat, local_root):
    make_dataset(cat, local_root, 1)
    keys = shard_keys(0)
    add_group(cat, local_root, keys[:5])
    with pytest.raises(DuplicateKeyError):
        add_group(cat, local_root, keys[:2], number=1)
    # Another group may have the same keys; the base's duplicate check ignores groups.
    add_group(cat, local_root, keys[:5], name="more", make=lambda k: {"more.txt": k})
    assert list(cat.get("train", keys[0])) == ["jpg", "json", "txt", "cap.txt", "more.txt"]
    # A name an older group holds needs replace_entries; the newer group's entry is read.
    with pytest.raises(EntryExistsError):
        add_group(cat, local_root, keys[:1], name="fix", make=lambda k: {"cap.txt": "fixed"})
    add_group(
        cat,
        local_root,
        keys[:1],
        name="fix",
        replace_entries=True,
        make=lambda k: {"cap.txt": "fixed"},
    )
    assert cat.get("train", keys[0])["cap.txt"].decode() == "fixed"
    assert cat.get("train", keys[0], entries=["cap.txt"])["cap.txt"].decode() == "fixed"
    assert [e.name for e in cat.describe("train", keys[0])] == [
        "jpg",
        "json",
        "txt",
        "cap.txt",
        "more.txt",
    ]
    assert cat.get_many("train", keys[:1]).records[0]["cap.txt"].decode() == "fixed"
    # Writing that name into the older group is refused: the newer one would hide it.
    with pytest.raises(EntryExistsError, match="added after"):
        add_group(
            cat,
            local_root,
            keys[:1],
            number=2,
            mode="replace",
            replace_entries=True,
            make=lambda k: {"cap.txt": "again"},
        )


@pytest.mark.skipif(
    not point.available() or recordcodec.active() != "compiled",
    reason="the compiled point lookup is not available here",
)
def test_the_compiled_path_merges_a_keys_groups_in_one_statement(sqlite_url, local_root):
    with Catalog(sqlite_url) as cat:
        make_dataset(cat, local_root, 1)
        keys = shard_keys(0)
        lookup = cat._lookup()
        assert point.is_compiled(lookup._point_lookup)
        cat.get("train", keys[0])  # warm: the shard cached and open
        fast = lookup.fast_get("train", keys[1], recordcodec.decode_spanned)
        assert fast is not None and list(fast) == ["jpg", "json", "txt"]
        add_group(cat, local_root, keys[:5])
        cat.get("train", keys[0])  # the group's shard cached and open too
        # A key with a group: its rows read (one pread each) and merged in C's call.
        merged = lookup.fast_get("train", keys[1], recordcodec.decode_spanned)
        assert merged is not None and list(merged) == ["jpg", "json", "txt", "cap.txt"]
        assert merged["cap.txt"].decode() == f"caption of {keys[1]}"
        with lookup.gate:  # the general Python path merges the same record
            assert merged == lookup.get("train", keys[1])
        assert merged.offset == cat.locate("train", keys[1]).offset  # the base's place
        assert lookup.fast_get("train", keys[9], recordcodec.decode_spanned) is not None
        # A group replacing a base entry: the newer group's entry, in the base's place.
        fix = {"name": "fix", "replace_entries": True, "make": lambda k: {"txt": "fixed"}}
        add_group(cat, local_root, keys[:2], **fix)
        cat.get("train", keys[0])
        fixed = lookup.fast_get("train", keys[1], recordcodec.decode_spanned)
        assert fixed is not None and list(fixed) == ["jpg", "json", "txt", "cap.txt"]
        assert fixed["txt"].decode() == "fixed" and fixed.decode()["txt"] == "fixed"
        # More rows than the compiled code merges (MAX_ROWS): the Python path's.
        for n in range(pypoint.MAX_ROWS):
            add_group(cat, local_root, keys[:1], name=f"g{n}", make=lambda k, n=n: {f"g{n}": k})
        cat.get("train", keys[2])
        assert lookup.fast_get("train", keys[0], recordcodec.decode_spanned) is None
        assert len(cat.get("train", keys[0])) == 4 + pypoint.MAX_ROWS
        # The batch statement's compiled rows decline a group's row.
        from shardcat.format.checksums import signed_key_hashes

        assert lookup._point_lookup.rows(
            "train", signed_key_hashes([k.encode() for k in keys[5:9]])
        )
        assert lookup._point_lookup.rows("train", signed_key_hashes([keys[1].encode()])) is None


def test_the_python_twin_merges_as_the_compiled_path_hands_over(sqlite_url, local_root):
    previous = point.use("python")
    try:
        with Catalog(sqlite_url) as cat:
            make_dataset(cat, local_root, 1)
            keys = shard_keys(0)
            add_group(cat, local_root, keys[:5])
            twin = cat._lookup()._point_lookup
            assert not point.is_compiled(twin)
            cat.get("train", keys[0])
            assert list(cat.get("train", keys[1])) == ["jpg", "json", "txt", "cap.txt"]
            # The twin merges a key's groups itself, as the compiled code does (not via rest).
            twin._rest = None
            merged = twin.get("train", keys[1], recordcodec.decode_spanned)
            assert merged is not None and list(merged) == ["jpg", "json", "txt", "cap.txt"]
            assert list(cat.get("train", keys[7])) == ["jpg", "json", "txt"]
            assert cat.get_many("train", keys[:6]).records[1]["cap.txt"].decode() == (
                f"caption of {keys[1]}"
            )
    finally:
        point.use(previous)


def test_an_overwrite_keeps_the_groups_entries_of_the_keys_it_still_has(cat, local_root):
    """Groups belong to keys: a new base keeps their captions; a key it lost loses its caption."""
    make_dataset(cat, local_root, 1)
    keys = shard_keys(0)
    captioned = add_group(cat, local_root, keys[:10])
    job = cat.begin_job("train")
    kept = keys[5:]  # the new base lost keys 0-4
    info = write_shard(
        f"{local_root}/new.shard", kept, make=lambda k: {"txt": f"new {k}", "json": {"k": k}}
    )
    cat.register_shard("train", info, job=job)
    cat.commit_job(job, replace=True)
    overwritten = cat.info("train").version
    assert sorted(cat.keys("train")) == sorted(kept)
    rec = cat.get("train", keys[7])
    assert list(rec) == ["txt", "json", "cap.txt"]
    assert rec["txt"].decode() == f"new {keys[7]}"
    assert rec["cap.txt"].decode() == f"caption of {keys[7]}"
    assert list(cat.get("train", keys[20])) == ["txt", "json"]
    with pytest.raises(KeyNotFoundError):
        cat.get("train", keys[2])
    assert [(g.name, g.records) for g in cat.groups("train")] == [("captions", 5)]
    # Older versions read what they read.
    assert cat.get("train", keys[2], version=captioned)["cap.txt"].decode() == (
        f"caption of {keys[2]}"
    )
    assert list(cat.get("train", keys[7], version=captioned)) == ["jpg", "json", "txt", "cap.txt"]
    got = cat.get_many("train", keys[5:10], version=overwritten)
    assert [r["cap.txt"].decode() for r in got.records] == [f"caption of {k}" for k in keys[5:10]]


def test_a_key_twice_in_a_group_job_is_an_error_even_when_missing_keys_are_skipped(cat, local_root):
    make_dataset(cat, local_root, 1)
    keys = shard_keys(0)
    # Without a base record and with on_missing="skip", the repeated key was left out silently.
    for n, twice in enumerate((keys[0], "ghost")):
        job = cat.begin_job("train")
        for part in range(2):  # one shard each: a shard's own keys are checked as it registers
            url = f"{local_root}/twice-{n}-{part}.shard"
            cat.register_shard("train", write_shard(url, [twice], make=caption), job=job)
        with pytest.raises(DuplicateKeyError, match=repr(twice)):
            cat.commit_job(job, group=GroupWrite("captions", on_missing="skip"))
        cat.abort_job(job)
    # Skipped samples are counted once each.
    job = cat.begin_job("train")
    info = write_shard(f"{local_root}/captions-9.shard", [keys[1], "ghost", "other"], make=caption)
    cat.register_shard("train", info, job=job)
    done = cat.commit_job(job, group=GroupWrite("captions", on_missing="skip"))
    assert (done.properties or {})[SKIPPED_KEYS] == 2
    assert cat.get("train", keys[1])["cap.txt"].decode() == f"caption of {keys[1]}"


def test_groups_cached_while_their_shards_were_staged_merge_in_group_order(cat, local_root):
    """A lookup that loads its shard cache while group jobs are staged (their records still
    group 0) merges them in group order once committed, not in the order they were staged."""
    make_dataset(cat, local_root, 2)
    key = shard_keys(0)[3]
    jobs = {}
    for name in ("late", "early"):  # staged in this order, committed in the other
        jobs[name] = cat.begin_job("train")
        info = write_shard(
            f"{local_root}/{name}-0.shard", [key], make=lambda k, n=name: {"cap.txt": n}
        )
        cat.register_shard("train", info, job=jobs[name])
    assert list(cat.get("train", key)) == ["jpg", "json", "txt"]  # the cache holds both staged
    cat.commit_job(jobs["early"], group=GroupWrite("early"))
    cat.commit_job(jobs["late"], group=GroupWrite("late", replace_entries=True))
    version = cat.info("train").version
    assert cat.get("train", key, version=version)["cap.txt"].decode() == "late"
    assert cat.get("train", key)["cap.txt"].decode() == "late"


def test_two_drops_of_one_group_racing_commit_once(postgres_url, local_root, monkeypatch):
    """The history checker's anomaly (PostgreSQL, seed 14): a drop that read the group live
    while another drop committed must find it gone under the dataset's lock, not drop it twice.
    (SQLite reads it under the write lock already: the race cannot happen there.)"""
    import shardcat.catalog.groups as groups
    from shardcat.errors import GroupNotFoundError

    with Catalog(postgres_url) as first, Catalog(postgres_url) as second:
        make_dataset(first, local_root, 1)
        add_group(first, local_root, shard_keys(0)[:3])
        before = first.info("train").version
        real = groups.live_group
        raced: list[int] = []

        def read_then_race(session, dataset_id, name):
            row = real(session, dataset_id, name)
            if not raced:  # the other drop commits between this read and the lock
                raced.append(0)  # once: the other drop reads through this too
                raced[0] = second.drop_group("train", name)
            return row

        monkeypatch.setattr(groups, "live_group", read_then_race)
        with pytest.raises(GroupNotFoundError, match="dropped at version"):
            first.drop_group("train", "captions")
        assert raced == [before + 1]
        assert first.info("train").version == before + 1  # one drop, one version
