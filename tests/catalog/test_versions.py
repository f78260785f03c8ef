"""Dataset versions: every commit is one; lookups at any kept version; tags, diff, delete, expire."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from shardcat.errors import (
    CommitConflictError,
    DuplicateKeyError,
    KeyConflictError,
    KeyNotFoundError,
    VersionNotFoundError,
)
from shardcat.reading import Catalog

from .helpers import write_shard

_names = itertools.count()


def _text(tag: str) -> Any:
    return lambda key: {"txt": f"{key}@{tag}"}


def commit_keys(
    cat: Catalog,
    root: str,
    keys: list[str],
    tag: str,
    *,
    on_duplicate: str = "error",
    replace: bool = False,
) -> int:
    """One job writing ``keys`` (payload ``key@tag``); returns the new version."""
    job = cat.begin_job("train")
    info = write_shard(f"{root}/s-{next(_names):05d}.shard", keys, make=_text(tag))
    cat.register_shard("train", info, job=job)
    cat.commit_job(job, on_duplicate=on_duplicate, replace=replace)  # type: ignore[arg-type]
    return cat.info("train").version


def value(cat: Catalog, key: str, version: int | str | None = None) -> str | None:
    try:
        return cat.get("train", key, version=version)["txt"].decode()  # type: ignore[no-any-return]
    except KeyNotFoundError:
        return None


@pytest.fixture
def train(cat: Catalog, local_root: str) -> tuple[Catalog, str]:
    cat.create_dataset("train", local_root)
    return cat, local_root


def test_every_commit_is_a_version_with_counts(train):
    cat, root = train
    v1 = commit_keys(cat, root, ["a", "b"], "1")
    v2 = commit_keys(cat, root, ["c"], "2")
    log = cat.log("train")
    assert [v.number for v in log] == [v2, v1]
    assert (log[0].records_added, log[0].total_records) == (1, 3)
    assert (log[1].records_added, log[1].records_removed, log[1].total_records) == (2, 0, 2)
    assert log[0].operation == "write" and log[0].job_id is not None
    assert log[0].bytes_added > 0 and log[0].total_bytes == log[0].bytes_added + log[1].bytes_added


def test_append_replace_keeps_the_old_version_readable(train):
    cat, root = train
    v1 = commit_keys(cat, root, ["a", "b"], "1")
    with pytest.raises(DuplicateKeyError, match="'a'"):
        commit_keys(cat, root, ["a"], "x")
    v2 = commit_keys(cat, root, ["a", "c"], "2", on_duplicate="replace")
    assert value(cat, "a") == "a@2" and value(cat, "c") == "c@2" and value(cat, "b") == "b@1"
    assert value(cat, "a", v1) == "a@1" and value(cat, "c", v1) is None
    assert cat.locate("train", "a", version=v1) != cat.locate("train", "a")
    assert cat.log("train")[0].records_removed == 1
    batch = cat.get_many("train", ["a", "b", "c"], version=v1)
    assert [r["txt"].decode() if r else None for r in batch] == ["a@1", "b@1", None]
    assert cat.count("train") == 3 and sorted(cat.keys("train")) == ["a", "b", "c"]
    assert v2 == v1 + 1


def test_append_skip_keeps_the_live_record(train):
    cat, root = train
    commit_keys(cat, root, ["a"], "1")
    v2 = commit_keys(cat, root, ["a", "b"], "2", on_duplicate="skip")
    assert value(cat, "a") == "a@1" and value(cat, "b") == "b@2"
    assert value(cat, "a", v2) == "a@1"
    assert cat.log("train")[0].records_added == 1
    assert cat.count("train") == 2


def test_duplicates_within_a_job_are_an_error_whatever_on_duplicate(train):
    cat, root = train
    commit_keys(cat, root, ["a"], "1")
    job = cat.begin_job("train")
    for _ in range(2):
        info = write_shard(f"{root}/d-{next(_names)}.shard", ["a", "z"], make=_text("2"))
        cat.register_shard("train", info, job=job)
    with pytest.raises(DuplicateKeyError, match="within the job"):
        cat.commit_job(job, on_duplicate="replace")
    assert value(cat, "a") == "a@1" and value(cat, "z") is None


def test_delete_keys_makes_a_version_without_them(train):
    cat, root = train
    v1 = commit_keys(cat, root, ["a", "b", "c"], "1")
    with pytest.raises(KeyNotFoundError, match="'nope'"):
        cat.delete_keys("train", ["a", "nope"])
    assert value(cat, "a") == "a@1"  # nothing changed
    assert cat.info("train").version == v1
    v2 = cat.delete_keys("train", ["a", "nope"], missing_ok=True, message="gdpr")
    assert value(cat, "a") is None and value(cat, "a", v1) == "a@1"
    entry = cat.log("train")[0]
    assert (entry.number, entry.operation, entry.message) == (v2, "delete", "gdpr")
    assert (entry.records_removed, entry.total_records) == (1, 2)
    assert sorted(cat.keys("train")) == ["b", "c"]


def test_a_deleted_key_says_which_version_deleted_it_and_which_still_reads_it(train):
    cat, root = train
    v1 = commit_keys(cat, root, ["a", "b"], "1")
    v2 = cat.delete_keys("train", ["a"])
    with pytest.raises(KeyNotFoundError) as err:
        cat.get("train", "a")
    text = str(err.value)
    assert f"version {v2} deleted it" in text
    assert f"version {v1} still reads it (get(..., version={v1})" in text
    with pytest.raises(KeyNotFoundError) as err:
        cat.get("train", "never")
    assert "deleted" not in str(err.value)
    commit_keys(cat, root, ["c"], "3")
    cat.expire("train", keep_last=1)
    with pytest.raises(KeyNotFoundError) as err:
        cat.get("train", "a")
    assert f"version {v2} deleted it" in str(err.value)
    assert "no kept version reads it" in str(err.value)


def test_tags_name_versions_and_survive_expire(train):
    cat, root = train
    v1 = commit_keys(cat, root, ["a"], "1")
    cat.tag("train", v1, "first")
    commit_keys(cat, root, ["a"], "2", on_duplicate="replace")
    commit_keys(cat, root, ["a"], "3", on_duplicate="replace")
    assert value(cat, "a", "first") == "a@1"
    assert cat.log("train")[-1].tags == ("first",)
    with pytest.raises(ValueError, match="already names"):
        cat.tag("train", v1 + 1, "first")
    result = cat.expire("train", keep_last=1)
    assert result.expired == [v1 + 1]
    assert value(cat, "a", "first") == "a@1" and value(cat, "a") == "a@3"
    with pytest.raises(VersionNotFoundError, match="expired"):
        cat.get("train", "a", version=v1 + 1)
    assert cat.untag("train", "first") == v1
    with pytest.raises(VersionNotFoundError, match="no tag"):
        cat.get("train", "a", version="first")


def test_expire_retires_shards_no_kept_version_sees(train):
    cat, root = train
    commit_keys(cat, root, ["a", "b"], "1")
    commit_keys(cat, root, ["a", "b"], "2", on_duplicate="replace")
    first = cat.visible_shards("train", cat.log("train")[-1].number)[1][0][0].url
    assert cat.expire("train", keep_last=1, dry_run=True).retired_shards == [first]
    assert first in cat.shard_urls(states=["committed"])  # dry run: nothing changed
    result = cat.expire("train", keep_last=1)
    assert result.retired_shards == [first] and len(cat.log("train")) == 1
    assert first in cat.shard_urls(states=["deleted"])
    assert value(cat, "a") == "a@2"


def test_a_shard_with_deleted_records_still_verifies_after_expire(train):
    """Expire keeps the rows of a live shard's hidden records: verify matches its whole footer."""
    cat, root = train
    commit_keys(cat, root, ["a", "b", "c"], "1")
    cat.delete_keys("train", ["b"])
    cat.expire("train", keep_last=1)
    assert sorted(cat.keys("train")) == ["a", "c"] and value(cat, "b") is None
    report = cat.verify("train")
    assert report.ok, str(report)


def test_expire_never_drops_the_latest(train):
    cat, root = train
    commit_keys(cat, root, ["a"], "1")
    with pytest.raises(ValueError, match="at least 1"):
        cat.expire("train", keep_last=0)
    assert cat.expire("train", keep_last=1).expired == []


def test_overwrite_is_a_version_too(train):
    cat, root = train
    v1 = commit_keys(cat, root, ["a", "b"], "1")
    v2 = commit_keys(cat, root, ["c"], "2", replace=True)
    assert value(cat, "a") is None and value(cat, "c") == "c@2"
    assert value(cat, "a", v1) == "a@1"
    assert cat.log("train")[0].operation == "overwrite"
    d = cat.diff("train", v1, v2, keys=True)
    assert (d.added, d.removed, d.replaced) == (1, 2, 0)
    assert d.added_keys == ["c"] and d.removed_keys == ["a", "b"]


def test_diff_counts_added_removed_replaced(train):
    cat, root = train
    v1 = commit_keys(cat, root, ["a", "b", "c"], "1")
    commit_keys(cat, root, ["b", "d"], "2", on_duplicate="replace")
    v3 = cat.delete_keys("train", ["c"])
    d = cat.diff("train", v1, v3, keys=True)
    assert (d.added_keys, d.removed_keys, d.replaced_keys) == (["d"], ["c"], ["b"])
    back = cat.diff("train", v3, v1)
    assert (back.added, back.removed, back.replaced) == (1, 1, 1)
    with pytest.raises(VersionNotFoundError):
        cat.diff("train", v1, 99)


def test_replace_conflict_names_the_keys(train):
    """Two jobs replacing the same key: the second to commit gets the key named."""
    cat, root = train
    commit_keys(cat, root, ["a", "b"], "1")
    first = cat.begin_job("train")
    second = cat.begin_job("train")
    for job, tag in ((first, "A"), (second, "B")):
        info = write_shard(f"{root}/c-{tag}.shard", ["a", f"new-{tag}"], make=_text(tag))
        cat.register_shard("train", info, job=job)
    cat.commit_job(first, on_duplicate="replace")
    with pytest.raises(KeyConflictError, match="'a'") as err:
        cat.commit_job(second, on_duplicate="replace")
    assert err.value.keys == ["a"]
    assert isinstance(err.value, CommitConflictError)
    assert value(cat, "a") == "a@A" and value(cat, "new-B") is None


def test_disjoint_appends_both_land(train):
    cat, root = train
    commit_keys(cat, root, ["a"], "1")
    first = cat.begin_job("train")
    second = cat.begin_job("train")
    for job, tag in ((first, "A"), (second, "B")):
        info = write_shard(f"{root}/j-{tag}.shard", [f"k-{tag}"], make=_text(tag))
        cat.register_shard("train", info, job=job)
    cat.commit_job(second, on_duplicate="replace")
    cat.commit_job(first, on_duplicate="replace")
    assert value(cat, "k-A") == "k-A@A" and value(cat, "k-B") == "k-B@B"


def test_unknown_version_and_tag_are_typed_errors(train):
    cat, root = train
    commit_keys(cat, root, ["a"], "1")
    with pytest.raises(VersionNotFoundError, match="no version 42"):
        cat.get("train", "a", version=42)
    with pytest.raises(VersionNotFoundError, match="no version 42"):
        cat.get_many("train", ["a"], version=42)
    with pytest.raises(VersionNotFoundError, match="no tag 'nope'"):
        cat.locate("train", "a", version="nope")
    with pytest.raises(ValueError, match="not a number"):
        cat.tag("train", 1, "7")


def test_remove_shard_is_a_version(train):
    cat, root = train
    v1 = commit_keys(cat, root, ["a"], "1")
    url = cat.visible_shards("train")[1][0][0].url
    cat.remove_shard("train", url)
    assert value(cat, "a") is None and value(cat, "a", v1) == "a@1"
    assert cat.log("train")[0].operation == "remove_shard"


def test_verify_and_entry_kinds_at_a_version(train):
    cat, root = train
    v1 = commit_keys(cat, root, ["a", "b"], "1")
    commit_keys(cat, root, ["c"], "2", replace=True)
    full = cat.verify("train")
    assert full.ok and full.shards_checked == 2  # every kept version's files
    at_v1 = cat.verify("train", version=v1)
    assert at_v1.ok and at_v1.shards_checked == 1
    assert [(k.name, k.record_count) for k in cat.entry_kinds("train")] == [("txt", 1)]
    assert [(k.name, k.record_count) for k in cat.entry_kinds("train", version=v1)] == [("txt", 2)]
    with pytest.raises(VersionNotFoundError):
        cat.verify("train", version=99)
