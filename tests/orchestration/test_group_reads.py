"""Column groups joined by the streaming readers (docs/GROUPS.md §5): the Dask bag,
SampleStream, the PyTorch dataset and to_dask_dataframe return whole samples.

Real Dask workers, real SQLite and PostgreSQL catalogs, local folders.
"""

from __future__ import annotations

import logging

import pytest

import shardcat
from shardcat.orchestration.joins import forward_run
from shardcat.readers import SampleStream, plan_tasks
from shardcat.reading import Catalog

from .test_groups import base, make


def add(cat, client, samples, **options):
    return shardcat.add_entries(
        samples,
        catalog=cat,
        dataset="train",
        group="captions",
        client=client,
        progress=False,
        **options,
    )


def caption(sample: dict) -> dict:
    return {"__key__": sample["__key__"], "txt": f"a photo of {sample['__key__']}"}


def expected(n: int, fixed: dict[str, str] | None = None, with_group: bool = True) -> dict:
    out = {}
    for s in base(n):
        k = s["__key__"]
        sample = {"__key__": k, "jpg": s["jpg"], "cls": s["cls"]}
        if with_group:
            sample["txt"] = (fixed or {}).get(k, f"a photo of {k}")
        out[k] = sample
    return out


def bag_samples(cat, **options) -> dict:
    return {s["__key__"]: s for s in shardcat.read(cat, "train", **options).compute()}


def stream_samples(cat, shuffle: bool = False, start: int = 0, **options) -> tuple[dict, dict]:
    entries = options.pop("entries", None)
    tasks = plan_tasks(cat, "train", None, None, entries=entries, **options)
    stream = SampleStream(tuple(tasks), entries=entries, shuffle=shuffle, seed=3, shuffle_buffer=7)
    got = list(stream.iter_reader(0, start=start))
    return {s["__key__"]: s for s in got}, stream.groups


def test_forward_run_is_the_longest_forward_read():
    assert forward_run([]) == []
    assert forward_run([(0, 1), (0, 5), (1, 0), (1, 7)]) == [True] * 4
    # A fix in a later shard interleaved with the group's first shard: the first shard streams.
    run = forward_run([(0, 0), (2, 0), (0, 10), (0, 20), (2, 10), (0, 30)])
    assert run == [True, False, True, True, False, True]


def test_aligned_group_streams_with_the_base_in_every_reader(client, tmp_path, catalog_url):
    with Catalog(catalog_url) as cat:
        make(cat, tmp_path / "ds", client, n=40)
        before = cat.info("train").version
        # Written from the dataset's own partitioning: aligned.
        add(cat, client, shardcat.read(cat, "train").map(caption))
        want = expected(40)
        assert bag_samples(cat) == want
        got, groups = stream_samples(cat)
        assert got == want and groups == {"captions": {"streamed": 40, "keyed": 0}}
        shuffled, _ = stream_samples(cat, shuffle=True)
        assert shuffled == want
        # Resumed mid-epoch (a shard's first records skipped): the rest, joined right.
        tasks = plan_tasks(cat, "train", None, None)
        stream = SampleStream(tuple(tasks), shuffle=False)
        rest = list(stream.iter_reader(0, start=20))
        assert [s["__key__"] for s in rest] == sorted(want)[20:]
        assert all(s == want[s["__key__"]] for s in rest)
        # entries= reads only the groups holding them.
        only, groups = stream_samples(cat, entries=("txt",))
        assert only == {k: {"__key__": k, "txt": s["txt"]} for k, s in want.items()}
        assert groups == {"captions": {"streamed": 40, "keyed": 0}}
        base_only, groups = stream_samples(cat, entries=("jpg",))
        assert groups == {} and all(set(s) == {"__key__", "jpg"} for s in base_only.values())
        assert {k: set(s) for k, s in bag_samples(cat, entries=["txt"]).items()} == {
            k: {"__key__", "txt"} for k in want
        }
        # The version before the group reads the base alone.
        assert bag_samples(cat, version=before) == expected(40, with_group=False)
        assert stream_samples(cat, version=before) == (expected(40, with_group=False), {})
        # A filter's records get their groups too.
        tasks = plan_tasks(cat, "train", "key >= :k", {"k": "k030"})
        chosen = list(SampleStream(tuple(tasks), shuffle=False).iter_reader(0))
        assert chosen == [want[f"k{i:03d}"] for i in range(30, 40)]
        frame = shardcat.to_dask_dataframe(cat, "train", entries=["cls", "txt"]).compute()
        assert sorted(frame["txt"]) == sorted(s["txt"] for s in want.values())


def test_unaligned_group_reads_by_key_and_says_so(client, tmp_path, catalog_url, caplog):
    with Catalog(catalog_url) as cat:
        make(cat, tmp_path / "ds", client, n=40)
        # Another order and shard size than the base's: read by key.
        samples = [caption(s) for s in reversed(base(40))]
        add(cat, client, samples, max_records_per_shard=7)
        want = expected(40)
        with caplog.at_level(logging.INFO, logger="shardcat.groups"):
            got, groups = stream_samples(cat, shuffle=True)
        assert got == want
        assert groups["captions"]["keyed"] > 0
        assert groups["captions"]["keyed"] + groups["captions"]["streamed"] == 40
        assert "read by key" in caplog.text
        assert bag_samples(cat) == want


def test_a_replace_fix_of_two_percent_and_a_drop(client, tmp_path, catalog_url):
    with Catalog(catalog_url) as cat:
        make(cat, tmp_path / "ds", client, n=100)
        add(cat, client, shardcat.read(cat, "train").map(caption))
        first = cat.info("train").version
        fixed = {"k017": "a cat on a mat", "k063": "a dog in fog"}
        fix = [{"__key__": k, "txt": t} for k, t in fixed.items()]
        add(cat, client, fix, mode="replace")
        fixed_at = cat.info("train").version
        want = expected(100, fixed)
        got, groups = stream_samples(cat)
        assert got == want
        # The fix is out of the base's order: those records are read by key, the rest stream.
        assert groups == {"captions": {"streamed": 98, "keyed": 2}}
        assert bag_samples(cat) == want
        # Older versions keep reading what they read.
        assert bag_samples(cat, version=first) == expected(100)
        assert stream_samples(cat, version=first)[0] == expected(100)
        cat.drop_group("train", "captions")
        assert bag_samples(cat) == expected(100, with_group=False)
        assert stream_samples(cat) == (expected(100, with_group=False), {})
        assert bag_samples(cat, version=fixed_at) == want


def test_torch_dataset_joins_groups(client, tmp_path, sqlite_url):
    pytest.importorskip("torch")
    from shardcat.torch import ShardIterableDataset

    with Catalog(sqlite_url) as cat:
        make(cat, tmp_path / "ds", client, n=30)
        add(cat, client, shardcat.read(cat, "train").map(caption))
    ds = ShardIterableDataset(sqlite_url, "train", seed=1, shuffle_buffer=8)
    assert ds.groups == {"captions": {"streamed": 30, "keyed": 0}}
    got = {s["__key__"]: s for s in ds}
    assert got == expected(30)
    texts = ShardIterableDataset(sqlite_url, "train", entries=["txt"], shuffle=False)
    assert [s["txt"] for s in texts] == [f"a photo of k{i:03d}" for i in range(30)]


def test_torch_datasets_join_groups_in_spawned_workers(client, tmp_path, sqlite_url):
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from shardcat.torch import ShardIterableDataset

    with Catalog(sqlite_url) as cat:
        make(cat, tmp_path / "ds", client, n=30)
        add(cat, client, shardcat.read(cat, "train").map(caption))
        add(cat, client, [{"__key__": "k004", "txt": "fixed"}], mode="replace")
    want = expected(30, {"k004": "fixed"})
    # The plan (tasks with their joins) is pickled to the spawned workers.
    ds = ShardIterableDataset(sqlite_url, "train", seed=2)
    assert ds.groups == {"captions": {"streamed": 29, "keyed": 1}}
    loader = DataLoader(
        ds, batch_size=4, num_workers=2, collate_fn=list, multiprocessing_context="spawn"
    )
    assert {s["__key__"]: s for batch in loader for s in batch} == want


def test_compact_keeps_groups_as_groups(client, tmp_path, catalog_url):
    with Catalog(catalog_url) as cat:
        make(cat, tmp_path / "ds", client, n=40)
        add(cat, client, shardcat.read(cat, "train").map(caption))
        add(cat, client, [{"__key__": "k022", "txt": "fixed"}], mode="replace")
        shardcat.delete_keys(cat, "train", [f"k{i:03d}" for i in range(0, 40, 3)])
        before = cat.info("train").version
        want_before = {k: s for k, s in expected(40, {"k022": "fixed"}).items() if int(k[1:]) % 3}
        summary = shardcat.compact(cat, "train", min_live=1.0, client=client)
        assert summary.version == before + 1 and summary.records == len(want_before)
        # Every base shard was rewritten; the group's records join the new ones by key.
        assert bag_samples(cat) == want_before
        got, groups = stream_samples(cat, shuffle=True)
        assert got == want_before
        assert sum(groups["captions"].values()) == len(want_before)
        many = cat.get_many("train", sorted(want_before))
        assert [r.decode() for r in many.records] == [want_before[k] for k in sorted(want_before)]
        assert [g.name for g in cat.groups("train")] == ["captions"]
        # The version before reads what it read.
        assert bag_samples(cat, version=before) == want_before
        assert cat.get("train", "k022", version=before)["txt"].decode() == "fixed"


def test_a_whole_group_shard_streams_beside_a_base_read_in_part(tmp_path, sqlite_url):
    """A group shard that is all of one base shard's records is paired by position alone;
    a base read of some of its records (a filter, a resumed read) passes the others' over."""
    import dataclasses

    from shardcat.catalog.groups import GroupWrite
    from shardcat.readers import iter_task_records

    keys = [f"k{i:03d}" for i in range(30)]
    with Catalog(sqlite_url) as cat:
        cat.create_dataset("train", str(tmp_path))
        with shardcat.ShardWriter(f"{tmp_path}/train-000000.shard", shard_number=0) as w:
            for k in keys:
                w.add(k, {"jpg": k.encode() * 3, "txt": f"base {k}"})
        cat.register_shard("train", w.close())
        job = cat.begin_job("train")
        url = f"{tmp_path}/train.captions-000000.shard"
        with shardcat.ShardWriter(url, metadata={"column_group": "captions"}) as w:
            for k in keys:
                w.add(k, {"cap": f"caption {k}", "txt": f"fixed {k}"})
        cat.register_shard("train", w.close(), job=job)
        cat.commit_job(job, group=GroupWrite("captions", replace_entries=True))
        (task,) = plan_tasks(cat, "train", None, None)
        (join,) = task.joins
        assert (join.streamed_count, join.keyed_count) == (30, 0)
        assert len(join.streamed) == 1 and len(join.streamed[0].offsets) == 30
        whole = list(iter_task_records(task, {}, None))
        assert [r.key for r in whole] == keys
        for rec in whole:
            assert list(rec) == ["jpg", "txt", "cap"]
            assert rec.decode() == cat.get("train", rec.key).decode()
            assert rec["txt"].decode() == f"fixed {rec.key}"
        # Every third base record from the fourth on (a filter's or a resumed read's).
        chosen = tuple(r.offset for r in whole[3::3])
        part = list(iter_task_records(dataclasses.replace(task, offsets=chosen), {}, None))
        assert [r.key for r in part] == keys[3::3]
        assert [r["cap"].decode() for r in part] == [f"caption {k}" for k in keys[3::3]]
