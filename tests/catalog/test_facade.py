"""What the Catalog hands to the layers above: summaries, entry kinds, job endings, worker handles."""

from __future__ import annotations

import datetime as dt
import pickle
from pathlib import Path

import pytest

from shardcat.catalog import DatasetSummary, EntryKind, catalog_exists
from shardcat.errors import CommitConflictError, DatasetNotFoundError
from shardcat.reading import Catalog, CatalogHandle

from .helpers import make_dataset, shard_keys, write_shard


def _url(root: str, i: int) -> str:
    return f"{root}/train-{i:06d}.shard"


def test_dataset_summaries_count_committed_shards_only(cat, local_root):
    infos = make_dataset(cat, local_root, 2)
    cat.create_dataset("empty", f"{local_root}/empty")
    job = cat.begin_job("train")
    cat.register_shard("train", write_shard(_url(local_root, 7), shard_keys(7)), job=job)
    summaries = cat.dataset_summaries()
    assert [s.name for s in summaries] == ["empty", "train"]
    empty, train = summaries
    assert empty == DatasetSummary(
        name="empty",
        root_url=f"{local_root}/empty",
        created_at=empty.created_at,
        shard_count=0,
        record_count=0,
        size_bytes=0,
    )
    assert (train.shard_count, train.record_count, train.size_bytes) == (
        2,
        sum(i.record_count for i in infos),
        sum(i.size for i in infos),
    )
    assert train.root_url == local_root
    assert train.created_at == cat.info("train").created_at
    assert train.created_at.tzinfo is not None
    assert abs(train.created_at - dt.datetime.now(dt.timezone.utc)) < dt.timedelta(hours=1)


def test_entry_kinds_count_committed_records_per_kind(cat, local_root):
    make_dataset(cat, local_root, 2)
    job = cat.begin_job("train")
    cat.register_shard("train", write_shard(_url(local_root, 7), shard_keys(7)), job=job)
    per_shard = len(shard_keys(0))
    assert cat.entry_kinds("train") == [
        EntryKind("jpg", "image/jpeg", "none", 2 * per_shard),
        EntryKind("json", "application/json", "none", 2 * per_shard),
        EntryKind("txt", "text/plain; charset=utf-8", "none", 2 * per_shard),
    ]
    cat.commit_job(job)
    assert {k.record_count for k in cat.entry_kinds("train")} == {3 * per_shard}
    cat.create_dataset("empty", f"{local_root}/empty")
    assert cat.entry_kinds("empty") == []
    with pytest.raises(DatasetNotFoundError, match="'nope'"):
        cat.entry_kinds("nope")


def test_a_job_ends_once_and_a_repeated_ending_is_harmless(cat, local_root):
    cat.create_dataset("train", local_root)
    committed = cat.begin_job("train")
    cat.register_shard("train", write_shard(_url(local_root, 0), shard_keys(0)), job=committed)
    first = cat.commit_job(committed)
    assert cat.commit_job(committed) == first
    with pytest.raises(CommitConflictError, match=f"job {committed.id} is committed; remove"):
        cat.abort_job(committed)
    aborted = cat.begin_job("train")
    cat.register_shard("train", write_shard(_url(local_root, 1), shard_keys(1)), job=aborted)
    ended = cat.abort_job(aborted)
    assert cat.abort_job(aborted) == ended
    with pytest.raises(CommitConflictError, match=f"job {aborted.id} was aborted; it cannot"):
        cat.commit_job(aborted)
    assert [s.url for s in cat.shards("train")] == [_url(local_root, 0)]


def test_a_handle_opens_the_same_catalog_and_hides_its_password():
    cat = Catalog("sqlite://", storage_options={"anon": True}, busy_timeout=7, max_open_shards=3)
    handle = cat.handle()
    # The gap merged on object stores is resolved when the catalog opens: unset, it is
    # derived from each store's measured latency (storage/gap.py), so workers derive their own.
    assert handle == CatalogHandle("sqlite://", {"anon": True}, 7, 3, None)
    with Catalog("sqlite://", remote_max_gap="64KiB") as fixed:
        assert fixed.handle().remote_max_gap == 64 << 10  # an explicit gap travels as it is
    clone = pickle.loads(pickle.dumps(handle))
    assert clone == handle and hash(clone) == hash(handle)
    with clone.open() as other:
        assert (other.url, other.storage_options, other.busy_timeout, other.max_open_shards) == (
            "sqlite://",
            {"anon": True},
            7,
            3,
        )
    secret = CatalogHandle("postgresql+psycopg://app:s3cret@db.example/cat")
    assert "s3cret" not in repr(secret)
    assert "db.example" in repr(secret)
    cat.close()


def test_handles_of_one_catalog_are_equal(catalog_url):
    with Catalog(catalog_url) as cat:
        assert cat.handle() == cat.handle()
        assert len({cat.handle(), cat.handle()}) == 1
        with cat.handle().open() as again:
            assert again.url == cat.url


def test_catalog_exists_never_creates_a_sqlite_file(tmp_path: Path):
    path = tmp_path / "missing.db"
    assert catalog_exists(f"sqlite:///{path}") is False
    assert not path.exists()
    Catalog(f"sqlite:///{path}").close()
    assert catalog_exists(f"sqlite:///{path}") is True
    assert catalog_exists("sqlite://") is True
    assert catalog_exists("postgresql+psycopg://postgres@127.0.0.1:1/none") is True
    assert catalog_exists("not a url") is True  # opening it says what is wrong
