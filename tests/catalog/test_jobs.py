"""Jobs: staged shards become visible together, or not at all; keys stay unique."""

from __future__ import annotations

import pytest

from shardcat.catalog import internal
from shardcat.errors import (
    CommitConflictError,
    DuplicateKeyError,
    JobNotFoundError,
    KeyNotFoundError,
    ShardNotFoundError,
)

from .helpers import shard_keys, write_shard


def _url(root, i):
    return f"{root}/train-{i:06d}.shard"


def test_staged_shards_are_invisible_until_commit(cat, local_root):
    cat.create_dataset("train", local_root)
    job = cat.begin_job("train", description="dask write", properties={"partitions": 3})
    for i in range(3):
        row = cat.register_shard(
            "train", write_shard(_url(local_root, i), shard_keys(i), shard_number=i), job=job
        )
        assert row.state == "staged" and row.job_id == job.id
    key = shard_keys(2)[4]
    with pytest.raises(KeyNotFoundError):
        cat.get("train", key)
    assert cat.get_many("train", [key]).missing == [key]
    assert cat.shards("train") == []
    assert len(cat.shards("train", state="staged")) == 3
    done = cat.commit_job(job)
    assert (
        done.state == "committed"
        and done.shard_count == 3
        and done.record_count == 3 * len(shard_keys(0))
    )
    assert done.version == cat.info("train").version
    assert cat.get("train", key).key == key
    assert [s.state for s in cat.shards("train")] == ["committed"] * 3
    # A retried barrier task commits again: harmless.
    assert cat.commit_job(job.id).state == "committed"
    assert cat.info("train").version == done.version


def test_abort_leaves_nothing_visible(cat, local_root):
    cat.create_dataset("train", local_root)
    job = cat.begin_job("train")
    for i in range(2):
        cat.register_shard("train", write_shard(_url(local_root, i), shard_keys(i)), job=job)
    aborted = cat.abort_job(job)
    assert aborted.state == "aborted"
    assert aborted.shard_count == 0
    assert cat.shards("train") == []
    assert [s.state for s in cat.shards("train", state=None)] == ["deleted", "deleted"]
    assert cat.get_many("train", shard_keys(0)).missing == shard_keys(0)
    with pytest.raises(CommitConflictError, match="aborted"):
        cat.commit_job(job)
    with pytest.raises(CommitConflictError):
        cat.register_shard("train", write_shard(_url(local_root, 5), shard_keys(5)), job=job)
    # The keys are free again for the next attempt.
    cat.register_shard("train", write_shard(_url(local_root, 0), shard_keys(0)))
    assert cat.get("train", shard_keys(0)[0]).key == shard_keys(0)[0]


def test_a_retried_task_replaces_its_staged_rows(cat, local_root):
    cat.create_dataset("train", local_root)
    job = cat.begin_job("train")
    url = _url(local_root, 0)
    first = cat.register_shard("train", write_shard(url, shard_keys(0, 10)), job=job)
    # The retry rewrites the same deterministic URL (here with other content).
    second = cat.register_shard("train", write_shard(url, shard_keys(0, 12)), job=job)
    assert first.id != second.id
    staged = cat.shards("train", state="staged")
    assert [s.id for s in staged] == [second.id]
    assert staged[0].record_count == 12
    cat.commit_job(job)
    assert cat.get_many("train", shard_keys(0, 12)).ok
    assert cat.job(job).record_count == 12


def test_duplicate_keys_across_shards_of_a_job(cat, local_root):
    cat.create_dataset("train", local_root)
    job = cat.begin_job("train")
    cat.register_shard("train", write_shard(_url(local_root, 0), ["a", "b", "c", "d"]), job=job)
    cat.register_shard("train", write_shard(_url(local_root, 1), ["e", "c", "a", "f"]), job=job)
    with pytest.raises(DuplicateKeyError, match=r"2 duplicate key\(s\).*'a', 'c'") as err:
        cat.commit_job(job)
    assert err.value.keys == ["a", "c"]
    # Within one job, on_duplicate cannot help: the advice is to write each key once, and
    # says why on_duplicate is no way out and what removes the job's files.
    text = str(err.value)
    assert "write each key once" in text and "only keys the dataset already has" in text
    assert 'on_duplicate="replace"' not in text and "shardcat gc" in text
    # Nothing became visible; the job can still be aborted.
    assert cat.shards("train") == []
    assert cat.job(job).state == "open"
    cat.abort_job(job)


def test_duplicate_keys_against_committed_records(cat, local_root):
    cat.create_dataset("train", local_root)
    cat.register_shard("train", write_shard(_url(local_root, 0), ["a", "b", "c"]))
    version = cat.info("train").version
    job = cat.begin_job("train")
    cat.register_shard("train", write_shard(_url(local_root, 1), ["x", "b"]), job=job)
    with pytest.raises(DuplicateKeyError) as err:
        cat.commit_job(job)
    assert err.value.keys == ["b"]
    # The way out names both policies, in the caller's terms; never "remove the shard".
    assert 'on_duplicate="replace"' in str(err.value) and '"skip"' in str(err.value)
    cli = err.value.render("cli")
    assert "--on-duplicate replace" in cli and "--on-duplicate skip" in cli
    assert "remove the shard" not in cli
    # Without a job, the same check runs at registration, and nothing is kept.
    with pytest.raises(DuplicateKeyError) as err:
        cat.register_shard("train", write_shard(_url(local_root, 2), ["y", "c", "a"]))
    assert err.value.keys == ["a", "c"]
    assert len(cat.shards("train", state=None)) == 2  # the committed one and the open job's
    assert cat.info("train").version == version
    with pytest.raises(KeyNotFoundError):
        cat.get("train", "y")


def test_registering_a_committed_url_again_is_refused(cat, local_root):
    cat.create_dataset("train", local_root)
    info = write_shard(_url(local_root, 0), shard_keys(0, 5))
    cat.register_shard("train", info)
    with pytest.raises(DuplicateKeyError, match="already committed"):
        cat.register_shard("train", info)
    assert len(cat.shards("train")) == 1


def test_keys_are_unique_per_dataset_not_per_catalog(cat, local_root):
    cat.create_dataset("train", local_root)
    cat.create_dataset("valid", local_root)
    cat.register_shard("train", write_shard(_url(local_root, 0), ["a", "b"]))
    cat.register_shard("valid", write_shard(_url(local_root, 1), ["a", "b"]))
    assert cat.locate("train", "a").url.endswith("000000.shard")
    assert cat.locate("valid", "a").url.endswith("000001.shard")


def test_commit_with_a_stale_expected_version_conflicts(cat, local_root):
    cat.create_dataset("train", local_root)
    seen = cat.info("train").version
    job = cat.begin_job("train")
    cat.register_shard("train", write_shard(_url(local_root, 0), ["a"]), job=job)
    cat.register_shard("train", write_shard(_url(local_root, 1), ["b"]))  # someone else commits
    with pytest.raises(CommitConflictError, match="another job committed"):
        cat.commit_job(job, expected_version=seen)
    assert cat.job(job).state == "open"
    assert cat.commit_job(job, expected_version=seen + 1).version == seen + 2


def test_every_commit_is_a_job_and_a_version(cat, local_root):
    cat.create_dataset("train", local_root)
    a = cat.register_shard("train", write_shard(_url(local_root, 0), ["a"]))
    b = cat.register_shard("train", write_shard(_url(local_root, 1), ["b"]))
    assert a.job_id != b.job_id
    assert cat.job(a.job_id).version == 1 and cat.job(b.job_id).version == 2
    assert cat.info("train").version == 2
    with pytest.raises(ShardNotFoundError, match="no committed shard"):
        cat.remove_shard("train", _url(local_root, 9))
    removed = cat.remove_shard("train", _url(local_root, 0))
    # Out of the latest version, still read by version 2 (until it expires).
    assert (removed.state, removed.removed_version) == ("committed", 3)
    assert cat.info("train").version == 3
    assert cat.get("train", "a", version=2).key == "a"
    with pytest.raises(KeyNotFoundError):
        cat.get("train", "a")
    assert [s.url for s in cat.shards("train")] == [_url(local_root, 1)]


def test_register_argument_checks(cat, local_root):
    cat.create_dataset("train", local_root)
    info = write_shard(_url(local_root, 0), ["a"])
    with pytest.raises(ValueError, match="begin_job"):
        cat.register_shard("train", info, state="staged")
    job = cat.begin_job("train")
    with pytest.raises(ValueError, match="commit_job"):
        cat.register_shard("train", info, job=job, state="committed")
    cat.create_dataset("other", local_root)
    with pytest.raises(ValueError, match="another dataset"):
        cat.register_shard("other", info, job=job)
    with pytest.raises(JobNotFoundError, match="no job 10000"):
        cat.commit_job(10_000)
    with pytest.raises(KeyError):  # a JobNotFoundError is a KeyError
        cat.abort_job(10_000)


def test_commit_with_replace_makes_the_job_the_whole_dataset(cat, local_root):
    cat.create_dataset("train", local_root)
    cat.register_shard("train", write_shard(_url(local_root, 0), ["a", "b"]))
    cat.register_shard("train", write_shard(_url(local_root, 1), ["c"]))
    job = cat.begin_job("train", description="overwrite")
    # The new contents may reuse keys of the old: they are retired first.
    cat.register_shard("train", write_shard(_url(local_root, 2), ["a", "x"]), job=job)
    cat.register_shard("train", write_shard(_url(local_root, 3), ["y"]), job=job)
    cat.commit_job(job, replace=True)
    assert [s.url for s in cat.shards("train")] == [_url(local_root, 2), _url(local_root, 3)]
    # The old shards leave the latest version; version 2 still reads them until it expires.
    old = [s for s in cat.shards("train", state=None) if s.removed_version is not None]
    assert sorted(s.url for s in old) == [_url(local_root, 0), _url(local_root, 1)]
    assert cat.get("train", "b", version=2).key == "b"
    cat.expire("train", keep_last=1)
    assert sorted(s.url for s in cat.shards("train", state="deleted")) == [
        _url(local_root, 0),
        _url(local_root, 1),
    ]
    assert cat.locate("train", "a").url == _url(local_root, 2)
    assert cat.get_many("train", ["b", "c"]).missing == ["b", "c"]
    # Duplicates within the replacing job are still refused.
    job2 = cat.begin_job("train")
    cat.register_shard("train", write_shard(_url(local_root, 4), ["p", "q"]), job=job2)
    cat.register_shard("train", write_shard(_url(local_root, 5), ["q"]), job=job2)
    with pytest.raises(DuplicateKeyError):
        cat.commit_job(job2, replace=True)
    assert [s.url for s in cat.shards("train")] == [_url(local_root, 2), _url(local_root, 3)]


def test_jobs_listing_and_purging_tombstones(cat, local_root):
    cat.create_dataset("train", local_root)
    done = cat.register_shard("train", write_shard(_url(local_root, 0), ["a"]))
    open_job = cat.begin_job("train", description="still running")
    cat.register_shard("train", write_shard(_url(local_root, 1), ["b"]), job=open_job)
    dead = cat.begin_job("train")
    cat.register_shard("train", write_shard(_url(local_root, 2), ["c"]), job=dead)
    cat.abort_job(dead)
    jobs = cat.jobs("train")
    assert [j.id for j in jobs] == [done.job_id, open_job.id, dead.id]
    assert [(j.state, j.shard_count, j.record_count) for j in jobs] == [
        ("committed", 1, 1),
        ("open", 1, 1),
        ("aborted", 0, 0),
    ]
    assert [j.id for j in cat.jobs("train", state="open")] == [open_job.id]
    assert jobs[0].created_at.tzinfo is not None
    # Only tombstones are purged, never live shards.
    assert (
        internal.purge_shards(
            cat, "train", [_url(local_root, 0), _url(local_root, 1), _url(local_root, 2)]
        )
        == 1
    )
    assert [s.url for s in cat.shards("train", state=None)] == [
        _url(local_root, 0),
        _url(local_root, 1),
    ]


def test_a_dataset_is_dropped_only_if_the_failed_job_was_all_it_had(cat, local_root):
    """What a failed first job removes (shardcat.orchestration.gc.forget_failed_dataset)."""
    cat.create_dataset("train", local_root)
    job = cat.begin_job("train")
    cat.register_shard("train", write_shard(_url(local_root, 0), shard_keys(0)), job=job)
    other = cat.begin_job("train")  # a concurrent job of the same new dataset
    cat.abort_job(job)
    assert not internal.drop_unused_dataset(cat, "train", job.id)  # another job: kept
    cat.abort_job(other)
    assert not internal.drop_unused_dataset(cat, "train", job.id)  # still another job's
    cat.create_dataset("solo", local_root)
    solo = cat.begin_job("solo")
    cat.register_shard("solo", write_shard(_url(local_root, 1), shard_keys(1)), job=solo)
    assert not internal.drop_unused_dataset(cat, "solo", solo.id)  # its shard is live (staged)
    cat.abort_job(solo)
    assert internal.drop_unused_dataset(cat, "solo", solo.id)
    assert [d.name for d in cat.datasets()] == ["train"]
    committed = cat.begin_job("train")
    cat.register_shard("train", write_shard(_url(local_root, 2), shard_keys(2)), job=committed)
    cat.commit_job(committed)
    assert not internal.drop_unused_dataset(cat, "train", committed.id)  # it has a version
    assert not internal.drop_unused_dataset(cat, "nope", 1)  # no such dataset: nothing to do
