"""compact(fold_groups=): column groups folded into the base shards, as one version (issue 32).

Real Dask workers, real SQLite and PostgreSQL catalogs: after the fold every read at the
latest version returns what it returned before, from the base records alone; older
versions read what they read; expire and gc then remove the groups' shards.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

import shardcat
from shardcat.catalog import internal
from shardcat.errors import (
    CommitConflictError,
    EntryExistsError,
    GroupNotFoundError,
    GroupsUnsupportedError,
    KeyConflictError,
)
from shardcat.orchestration.gc import gc
from shardcat.reading import Catalog

from .test_groups import add, captions, make

NOW = dt.timedelta(0)
N = 50
KEYS = [f"k{i:03d}" for i in range(N)]


def _samples(cat: Catalog, version: int | None = None) -> dict[str, Any]:
    """Every sample as ``get_many`` returns it: its entries' names in order, and their bytes."""
    batch = cat.get_many("train", KEYS, version=version)
    return {
        r.key: [(name, bytes(r[name].data)) for name in r] for r in batch.records if r is not None
    }


def _streamed(url: str) -> dict[str, Any]:
    """Every sample as the Dask bag streams it (the streaming readers' join)."""
    bag = shardcat.read(url, "train")
    return {s["__key__"]: s for s in bag.compute(scheduler="sync")}


def _gets(cat: Catalog) -> dict[str, Any]:
    return {k: dict(cat.get("train", k).decode()) for k in KEYS}


def _two_groups(cat: Catalog, root: Path, client: Any) -> None:
    """50 samples in 4 base shards; captions of all (1 of them, 2 %, fixed); depth of 20."""
    make(cat, root, client, n=N)
    add(cat, client, captions(KEYS))
    add(cat, client, [{"__key__": "k007", "txt": "a cat on a mat"}], mode="replace")
    add(cat, client, [{"__key__": k, "depth": f"d{k}"} for k in KEYS[:20]], group="depth")


def test_fold_every_group_keeps_every_read_and_gc_removes_the_group_shards(
    client, tmp_path, catalog_url
):
    with Catalog(catalog_url) as cat:
        _two_groups(cat, tmp_path / "ds", client)
        before = cat.info("train").version
        samples, gets, streamed = _samples(cat), _gets(cat), _streamed(catalog_url)
        assert gets["k007"]["txt"] == "a cat on a mat" and gets["k003"]["depth"] == "dk003"
        group_shards = {
            s.url for s in cat.shards("train") if ".captions-" in s.url or ".depth-" in s.url
        }
        assert group_shards
        total_before = cat.log("train")[0].total_records  # 50 base + 50 captions + 20 depth

        summary = shardcat.compact(cat, "train", fold_groups=True, client=client)

        assert summary.version == before + 1
        assert summary.folded == {"captions": 50, "depth": 20}
        assert summary.records == 50 and summary.superseded == 0
        assert "folded groups 'captions' (50 records), 'depth' (20 records)" in str(summary)
        top = cat.log("train")[0]
        assert (top.number, top.operation) == (summary.version, "fold")
        assert (top.records_added, top.records_removed) == (50, 50 + 50 + 20)
        assert top.total_records == total_before - 70 == 50
        groups = cat.groups("train")
        assert [(g.name, g.dropped_version, g.records) for g in groups] == [
            ("captions", summary.version, 0),
            ("depth", summary.version, 0),
        ]
        # The latest version: the same samples, names in the same order, from the base alone.
        assert _samples(cat) == samples
        assert _gets(cat) == gets
        assert _streamed(catalog_url) == streamed
        loc = cat.locate("train", "k007")
        assert loc.url in summary.written and loc.groups == ()
        # The fixed caption, not the one it replaced; a sample without depth is unchanged.
        assert cat.get("train", "k007")["txt"].decode() == "a cat on a mat"
        assert list(cat.get("train", "k030")) == ["jpg", "cls", "txt"]
        # The version before still reads the groups' shards.
        assert _samples(cat, before) == samples
        assert cat.locate("train", "k007", version=before).groups
        assert cat.verify("train").ok

        # Entry names live in the base now: a caption fix replaces entries (or is a new group).
        with pytest.raises(EntryExistsError):
            add(cat, client, [{"__key__": "k001", "txt": "fixed"}], group="fix")
        add(cat, client, [{"__key__": "k001", "txt": "fixed"}], group="fix", replace_entries=True)
        assert cat.get("train", "k001")["txt"].decode() == "fixed"

        # Once no kept version reads them, gc deletes the group shards (and the old base).
        retired = set(cat.expire("train", keep_last=1).retired_shards)
        assert group_shards <= retired and set(summary.compacted) <= retired
        report = gc(cat, "train", grace=NOW)
        assert group_shards <= set(report.deleted_shards)
        assert not any(Path(u).exists() for u in group_shards)
        samples["k001"] = [(n, b"fixed" if n == "txt" else d) for n, d in samples["k001"]]
        assert _samples(cat) == samples
        assert cat.verify("train").ok


def test_fold_one_of_two_groups_rewrites_only_the_shards_it_touches(client, tmp_path, sqlite_url):
    with Catalog(sqlite_url) as cat:
        _two_groups(cat, tmp_path / "ds", client)
        before = cat.info("train").version
        samples = _samples(cat)
        base_shards = [row.url for row, _ in internal.visible_shards(cat, "train")[1]]
        depth_bases = {cat.locate("train", k, version=before).url for k in KEYS[:20]}

        summary = shardcat.compact(cat, "train", fold_groups=["depth"], client=client)

        assert summary.folded == {"depth": 20}
        assert set(summary.compacted) == depth_bases
        assert summary.records == sum(
            1 for k in KEYS if cat.locate("train", k, version=before).url in depth_bases
        )
        assert set(summary.kept) == set(base_shards) - depth_bases
        assert [(g.name, g.dropped_version) for g in cat.groups("train")] == [
            ("captions", None),
            ("depth", summary.version),
        ]
        # The same entries; a sample with depth lists it before the (older, unfolded) captions
        # now, since the base's names come first (GROUPS.md §6).
        assert {k: dict(v) for k, v in _samples(cat).items()} == {
            k: dict(v) for k, v in samples.items()
        }
        assert list(cat.get("train", "k003")) == ["jpg", "cls", "depth", "txt"]
        assert list(cat.get("train", "k030")) == ["jpg", "cls", "txt"]
        assert _samples(cat, before) == samples
        # The captions stay a group, joined to the rewritten base records by key.
        assert cat.locate("train", "k003").groups
        assert cat.verify("train").ok
        # Folding the rest later is another version.
        again = shardcat.compact(cat, "train", fold_groups=True, client=client)
        assert again.folded == {"captions": 50}
        assert {k: dict(v) for k, v in _samples(cat).items()} == {
            k: dict(v) for k, v in samples.items()
        }
        assert list(cat.get("train", "k003")) == ["jpg", "cls", "depth", "txt"]


def test_a_later_group_replacing_an_entry_folds_only_with_the_older_one(
    client, tmp_path, sqlite_url
):
    with Catalog(sqlite_url) as cat:
        make(cat, tmp_path / "ds", client, n=N)
        add(cat, client, captions(KEYS))
        add(cat, client, captions(KEYS[:5], "better"), group="better", replace_entries=True)
        version = cat.info("train").version
        samples = _samples(cat)
        assert cat.get("train", "k002")["txt"].decode() == "better k002"
        # Folded alone, "better" would lose to "captions" again: refused, nothing changes.
        with pytest.raises(EntryExistsError, match="older group 'captions'") as e:
            shardcat.compact(cat, "train", fold_groups=["better"], client=client)
        assert "fold_groups=" in str(e.value) and e.value.names == ["txt"]
        # The command line's advice is a command that runs: --fold-groups takes no names.
        assert e.value.hint is not None
        assert "--fold-group captions --fold-group better" in e.value.hint.cli
        assert "--fold-groups captions" not in e.value.hint.cli
        assert cat.info("train").version == version
        assert cat.jobs("train", state="open") == []
        # Folding "captions" alone is fine ("better" is newer and still wins); so is both.
        summary = shardcat.compact(cat, "train", fold_groups=True, client=client)
        assert summary.folded == {"captions": 50, "better": 5}
        assert _samples(cat) == samples


def test_fold_refusals_change_nothing(client, tmp_path, sqlite_url):
    with Catalog(sqlite_url) as cat:
        make(cat, tmp_path / "ds", client, n=N)
        add(cat, client, captions(KEYS))
        cat.drop_group("train", "captions")
        version = cat.info("train").version
        with pytest.raises(GroupNotFoundError, match="dropped at version"):
            shardcat.compact(cat, "train", fold_groups=["captions"], client=client)
        with pytest.raises(GroupNotFoundError, match="no group 'nope'"):
            shardcat.compact(cat, "train", fold_groups=["nope"], client=client)
        with pytest.raises(GroupNotFoundError, match="no group 'nope'"):  # one name, as a str
            shardcat.compact(cat, "train", fold_groups="nope", client=client)
        assert cat.info("train").version == version
        # No live group: fold_groups=True is a plain compaction (nothing to compact here).
        summary = shardcat.compact(cat, "train", fold_groups=True, client=client)
        assert summary.version is None and summary.folded == {}


def _meanwhile(cat: Catalog, change: Any) -> None:
    """Run ``change`` (through another connection) between the tasks and the commit."""
    real_commit = Catalog.commit_job

    def commit_after_change(self: Catalog, job: Any, **kw: Any) -> Any:
        change()
        return real_commit(self, job, **kw)

    cat.commit_job = commit_after_change.__get__(cat)  # type: ignore[method-assign]


@pytest.mark.parametrize("change", ["fix", "base", "delete", "drop"])
def test_a_fold_refuses_what_changed_its_groups_meanwhile(client, tmp_path, catalog_url, change):
    """A fold drops its groups: a change to them (or to a base record with entries) that landed
    while it ran would be lost, so the fold is refused and what landed stays."""
    with Catalog(catalog_url) as cat:
        make(cat, tmp_path / "ds", client, n=N)
        add(cat, client, captions(KEYS[:20]))
        other = Catalog(catalog_url)
        if change == "fix":
            run = lambda: add(other, client, [{"__key__": "k001", "txt": "new"}], mode="replace")  # noqa: E731
        elif change == "base":
            run = lambda: shardcat.write(  # noqa: E731
                [{"__key__": "k002", "jpg": b"new", "cls": "9"}],
                str(tmp_path / "ds"),
                catalog=other,
                dataset="train",
                mode="append",
                on_duplicate="replace",
                client=client,
                progress=False,
            )
        elif change == "delete":
            run = lambda: other.delete_keys("train", ["k003"])  # noqa: E731
        else:
            run = lambda: other.drop_group("train", "captions")  # noqa: E731
        _meanwhile(cat, run)
        error = KeyConflictError if change != "drop" else CommitConflictError
        with pytest.raises(error, match="run compact again"):
            shardcat.compact(cat, "train", fold_groups=True, client=client)
        assert cat.log("train")[0].operation != "fold"
        assert cat.jobs("train", state="open") == []
        groups = cat.groups("train")
        assert groups[0].dropped_version is None if change != "drop" else groups[0].dropped_version
        if change == "fix":
            assert cat.get("train", "k001")["txt"].decode() == "new"
        if change == "base":
            assert cat.get("train", "k002")["txt"].decode() == "a photo of k002"
            assert cat.get("train", "k002")["jpg"].data == b"new"
        assert cat.verify("train").ok


def test_a_change_to_other_keys_meanwhile_lets_the_fold_land(client, tmp_path, sqlite_url):
    with Catalog(sqlite_url) as cat:
        make(cat, tmp_path / "ds", client, n=N)  # shards of 15: k000-k014 in the first
        add(cat, client, captions(KEYS[:10]))
        other = Catalog(sqlite_url)
        # k012 (first shard, no caption) is deleted meanwhile: its rewritten copy is left out,
        # as compact leaves out the copies of keys changed meanwhile.
        _meanwhile(cat, lambda: other.delete_keys("train", ["k012"]))
        samples = _samples(cat)
        del samples["k012"]
        summary = shardcat.compact(cat, "train", fold_groups=True, client=client)
        assert summary.folded == {"captions": 10}
        assert (summary.records, summary.superseded) == (14, 1)
        assert [v.operation for v in cat.log("train")[:2]] == ["fold", "delete"]
        assert _samples(cat) == samples
        assert cat.verify("train").ok


def test_a_dataset_indexed_in_place_is_refused(client, tmp_path, sqlite_url):
    from .test_groups_in_place import _caption, _tars

    root = tmp_path / "tars"
    keys = _tars(root)
    shardcat.index_tar(str(root), catalog=sqlite_url, dataset="t", client=client)
    _caption(keys[:3], sqlite_url, "t", client)
    with Catalog(sqlite_url) as cat:
        version = cat.info("t").version
        with pytest.raises(
            GroupsUnsupportedError, match=r"indexed in place \(base shards of kind 'tar'\)"
        ) as e:
            shardcat.compact(cat, "t", fold_groups=True, client=client)
        assert "compact without fold_groups" in str(e.value)
        assert cat.info("t").version == version
        assert [g.dropped_version for g in cat.groups("t")] == [None]
