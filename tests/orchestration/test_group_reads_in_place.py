"""Column groups joined by the streaming readers on datasets indexed in place (docs/GROUPS.md §5).

The base is the user's files: WebDataset tars, a folder of files, an MDS
directory, a LitData directory; a caption group lives in the dataset's
``_groups/`` folder. The Dask bag, SampleStream, the PyTorch dataset (spawned
DataLoader workers) and to_dask_dataframe must return what ``get`` returns
for every key, the group's entries included, at every version: an aligned
group (written from ``shardcat.read(...).map(...)``) streams beside the base,
a fix written later is read by key and said so.

Real Dask workers, real SQLite and PostgreSQL catalogs, real files.
"""

from __future__ import annotations

import io
import logging
import shutil
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardcat
from shardcat.readers import SampleStream, plan_tasks
from shardcat.reading import Catalog

DATA = Path(__file__).parents[1] / "data" / "inplace"

KINDS = ["tar", "files", "mds", "litdata"]


def _tars(root: Path, shards: int, per_shard: int) -> None:
    root.mkdir()
    for part in range(shards):
        with tarfile.open(root / f"part-{part:04d}.tar", "w") as tf:
            for i in range(per_shard):
                key = f"s{part}_{i:03d}"
                for ext, data in (("jpg", bytes([i]) * (50 + i)), ("cls", str(i).encode())):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))


def _files(root: Path, n: int) -> None:
    for i in range(n):
        d = root / f"d{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"k{i:03d}.txt").write_text("x" * (i + 1))
        (d / f"k{i:03d}.json").write_text(f'{{"i": {i}}}')


def make(kind: str, tmp: Path, url: str, client: Any, n: int = 30) -> str:
    """A dataset ``kind`` of that kind indexed in place (``n`` samples for tars and folders)."""
    root = tmp / kind
    if kind == "tar":
        _tars(root, 3, n // 3)
        shardcat.index_tar(str(root), catalog=url, dataset=kind, client=client)
    elif kind == "files":
        _files(root, n)
        # 2 files a sample, 10 files a group: several base shards of 5 samples.
        shardcat.index_files(str(root), catalog=url, dataset=kind, client=client, group_files=10)
    else:
        shutil.copytree(DATA / kind, root)  # its _groups/ folder is written inside
        key = {"key_column": "id"} if kind == "mds" else {}
        shardcat.index_directory(
            str(root), format=kind, catalog=url, dataset=kind, client=client, **key
        )
    return kind


def caption(sample: dict[str, Any]) -> dict[str, Any]:
    return {"__key__": sample["__key__"], "cap.txt": f"caption of {sample['__key__']}"}


def add(url: str, dataset: str, client: Any, samples: Any, **options: Any) -> None:
    shardcat.add_entries(
        samples, catalog=url, dataset=dataset, group="cap", client=client, progress=False,
        **options,
    )  # fmt: skip


def plain(value: Any) -> Any:
    """A decoded value comparable with ``==`` (arrays by dtype, shape and bytes)."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return value


def raw(sample: dict[str, Any]) -> dict[str, Any]:
    """An undecoded sample's entries as bytes."""
    return {k: v if k == "__key__" else bytes(v.data) for k, v in sample.items()}


def by_key(samples: Any) -> dict[str, Any]:
    return {s["__key__"]: s for s in samples}


def oracle(cat: Catalog, dataset: str, version: int | None = None, entries: Any = None) -> dict:
    """Every sample as ``get`` merges it (the base and its groups), undecoded."""
    keys = sorted(cat.keys(dataset, version=version))
    out = {}
    for k in keys:
        rec = cat.get(dataset, k, version=version, entries=entries)
        out[k] = {"__key__": k, **{n: bytes(e.data) for n, e in rec.items()}}
    return out


def decoded(want: dict[str, Any], cat: Catalog, dataset: str, version: int | None = None) -> dict:
    return {
        k: plain(cat.get(dataset, k, version=version).decode(writable=True)) for k in sorted(want)
    }


def bag(cat: Catalog, dataset: str, **options: Any) -> dict[str, Any]:
    return by_key(raw(s) for s in shardcat.read(cat, dataset, decode=False, **options).compute())


def bag_decoded(cat: Catalog, dataset: str, **options: Any) -> dict[str, Any]:
    """The bag's samples decoded (undecoded ones with a keyed group part do not pickle yet)."""
    return by_key(plain(s) for s in shardcat.read(cat, dataset, **options).compute())


def stream(
    cat: Catalog, dataset: str, *, shuffle: bool = False, start: int = 0, **options: Any
) -> tuple[dict[str, Any], dict[str, dict[str, int]]]:
    entries = options.pop("entries", None)
    tasks = plan_tasks(cat, dataset, None, None, entries=entries, **options)
    s = SampleStream(
        tuple(tasks), entries=entries, shuffle=shuffle, seed=5, shuffle_buffer=6,
        catalog=cat.handle(),
    )  # fmt: skip
    return by_key(plain(x) for x in s.iter_reader(0, start=start)), s.groups


@pytest.mark.parametrize("kind", KINDS)
def test_an_aligned_group_streams_with_in_place_data_in_every_reader(
    kind, client, tmp_path, sqlite_url
):
    ds = make(kind, tmp_path, sqlite_url, client)
    with Catalog(sqlite_url) as cat:
        before = cat.info(ds).version
        base_only = oracle(cat, ds)
    # Written from the dataset's own read: one group shard per base shard, in its order.
    add(sqlite_url, ds, client, shardcat.read(sqlite_url, ds).map(caption))
    with Catalog(sqlite_url) as cat:
        want = oracle(cat, ds)
        n = len(want)
        assert all(w["cap.txt"] == f"caption of {k}".encode() for k, w in want.items())
        assert bag(cat, ds) == want
        got, groups = stream(cat, ds)
        assert got == decoded(want, cat, ds)
        assert groups == {"cap": {"streamed": n, "keyed": 0}}
        shuffled, _ = stream(cat, ds, shuffle=True)
        assert shuffled == got
        # Resumed in the middle of a base shard: the rest, each with its own caption.
        rest, _ = stream(cat, ds, start=n // 2 + 1)
        assert len(rest) == n - n // 2 - 1 and all(rest[k] == got[k] for k in rest)
        # entries= joins only the groups holding them; the base's own entries stay base reads.
        only = bag(cat, ds, entries=["cap.txt"])
        assert only == {k: {"__key__": k, "cap.txt": w["cap.txt"]} for k, w in want.items()}
        texts, groups = stream(cat, ds, entries=("cap.txt",))
        assert texts == {k: {"__key__": k, "cap.txt": f"caption of {k}"} for k in want}
        assert groups == {"cap": {"streamed": n, "keyed": 0}}
        # The version before the group reads the base alone.
        assert bag(cat, ds, version=before) == base_only
        assert stream(cat, ds, version=before)[1] == {}
        frame = shardcat.to_dask_dataframe(cat, ds, entries=["cap.txt"]).compute()
        assert sorted(frame["cap.txt"]) == sorted(f"caption of {k}" for k in want)


@pytest.mark.parametrize("kind", KINDS)
def test_a_fix_is_read_by_key_the_rest_streams_older_versions_read_theirs(
    kind, client, tmp_path, sqlite_url, caplog
):
    ds = make(kind, tmp_path, sqlite_url, client)
    add(sqlite_url, ds, client, shardcat.read(sqlite_url, ds).map(caption))
    with Catalog(sqlite_url) as cat:
        first = cat.info(ds).version
        first_want = oracle(cat, ds)
        keys = sorted(first_want)
    # Each the first of its base shard's samples (not the last: a fix after the shard's
    # other records reads forward, and streams).
    fixed = {keys[0]: "a cat on a mat", keys[-2]: "a dog in fog"}
    add(sqlite_url, ds, client, [{"__key__": k, "cap.txt": t} for k, t in fixed.items()],
        mode="replace")  # fmt: skip
    with Catalog(sqlite_url) as cat:
        fixed_at = cat.info(ds).version
        want = oracle(cat, ds)
        assert {k: want[k]["cap.txt"].decode() for k in fixed} == fixed
        assert bag_decoded(cat, ds) == decoded(want, cat, ds)
        with caplog.at_level(logging.INFO, logger="shardcat.groups"):
            got, groups = stream(cat, ds, shuffle=True)
        assert got == decoded(want, cat, ds)
        assert groups == {"cap": {"streamed": len(keys) - 2, "keyed": 2}}
        assert f"column group 'cap' of dataset {ds!r}: 2 of its {len(keys)}" in caplog.text
        # Older versions keep reading what they read; a drop is a version too.
        assert bag_decoded(cat, ds, version=first) == decoded(first_want, cat, ds, first)
        assert stream(cat, ds, version=first)[0] == decoded(first_want, cat, ds, first)
        cat.drop_group(ds, "cap")
        assert all("cap.txt" not in s for s in bag(cat, ds).values())
        assert stream(cat, ds)[1] == {}
        assert bag_decoded(cat, ds, version=fixed_at) == decoded(want, cat, ds, fixed_at)


@pytest.mark.parametrize("kind", ["tar", "files"])
def test_an_unaligned_group_on_in_place_data_reads_by_key(kind, client, tmp_path, catalog_url):
    ds = make(kind, tmp_path, catalog_url, client)
    with Catalog(catalog_url) as cat:
        keys = sorted(cat.keys(ds))
    # Another order and shard size than the base's.
    add(catalog_url, ds, client, [caption({"__key__": k}) for k in reversed(keys)],
        max_records_per_shard=7)  # fmt: skip
    with Catalog(catalog_url) as cat:
        want = oracle(cat, ds)
        assert len(want) == len(keys) and all("cap.txt" in w for w in want.values())
        assert bag_decoded(cat, ds) == decoded(want, cat, ds)
        got, groups = stream(cat, ds, shuffle=True)
        assert got == decoded(want, cat, ds)
        assert groups["cap"]["keyed"] > 0
        assert groups["cap"]["keyed"] + groups["cap"]["streamed"] == len(keys)
        # A filter's records get their groups too.
        tasks = plan_tasks(cat, ds, "key >= :k", {"k": keys[20]})
        chosen = list(
            SampleStream(tuple(tasks), shuffle=False, catalog=cat.handle()).iter_reader(0)
        )
        assert by_key(plain(s) for s in chosen) == {
            k: v for k, v in decoded(want, cat, ds).items() if k >= keys[20]
        }


def test_two_percent_fix_of_a_tar_dataset(client, tmp_path, sqlite_url):
    """100 samples in 4 tars, a caption group from the bag, 2 % of it fixed later."""
    _tars(tmp_path / "tars", 4, 25)
    shardcat.index_tar(str(tmp_path / "tars"), catalog=sqlite_url, dataset="t", client=client)
    add(sqlite_url, "t", client, shardcat.read(sqlite_url, "t", entries=["cls"]).map(caption))
    fixed = [{"__key__": "s1_007", "cap.txt": "fixed"}, {"__key__": "s3_020", "cap.txt": "too"}]
    add(sqlite_url, "t", client, fixed, mode="replace")
    with Catalog(sqlite_url) as cat:
        want = oracle(cat, "t")
        assert want["s1_007"]["cap.txt"] == b"fixed" and want["s3_020"]["cap.txt"] == b"too"
        got, groups = stream(cat, "t")
        assert groups == {"cap": {"streamed": 98, "keyed": 2}}
        assert got == decoded(want, cat, "t")
        assert bag_decoded(cat, "t") == got


def test_indexing_a_folder_again_its_captions_still_stream(client, tmp_path, sqlite_url):
    ds = make("files", tmp_path, sqlite_url, client)
    add(sqlite_url, ds, client, shardcat.read(sqlite_url, ds).map(caption))
    root = tmp_path / "files"
    (root / "d1" / "k010.txt").write_text("changed")
    shardcat.index_files(str(root), catalog=sqlite_url, dataset=ds, client=client, group_files=10)
    with Catalog(sqlite_url) as cat:
        want = oracle(cat, ds)
        assert want["d1/k010"]["txt"] == b"changed"
        assert want["d1/k010"]["cap.txt"] == b"caption of d1/k010"
        assert bag_decoded(cat, ds) == decoded(want, cat, ds)
        got, groups = stream(cat, ds)
        assert got == decoded(want, cat, ds)
        assert sum(groups["cap"].values()) == len(want)


@pytest.mark.parametrize("kind", ["tar", "files"])
def test_torch_dataloader_joins_groups_of_in_place_data(kind, client, tmp_path, sqlite_url):
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from shardcat.torch import ShardIterableDataset

    ds = make(kind, tmp_path, sqlite_url, client)
    add(sqlite_url, ds, client, shardcat.read(sqlite_url, ds).map(caption))
    with Catalog(sqlite_url) as cat:
        key = sorted(cat.keys(ds))[2]  # inside its base shard: the fix is out of its order
    add(sqlite_url, ds, client, [{"__key__": key, "cap.txt": "fixed"}], mode="replace")
    with Catalog(sqlite_url) as cat:
        want = {k: plain(v) for k, v in decoded(oracle(cat, ds), cat, ds).items()}
    assert want[key]["cap.txt"] == "fixed"
    data = ShardIterableDataset(sqlite_url, ds, seed=2)
    assert data.groups == {"cap": {"streamed": len(want) - 1, "keyed": 1}}
    # The plan (tasks with their joins) is pickled to the spawned workers.
    loader = DataLoader(
        data, batch_size=4, num_workers=2, collate_fn=list, multiprocessing_context="spawn"
    )
    assert {s["__key__"]: plain(s) for batch in loader for s in batch} == want


def test_entries_of_a_group_only_read_no_bytes_of_the_tars(
    client, tmp_path, sqlite_url, monkeypatch
):
    """``entries=`` naming a group's entries only: the tars' records are joined, never read."""
    import importlib

    from shardcat.orchestration import tar_rows
    from shardcat.orchestration.read import iter_tar_records

    ds = make("tar", tmp_path, sqlite_url, client)
    add(sqlite_url, ds, client, shardcat.read(sqlite_url, ds).map(caption))
    read_module = importlib.import_module("shardcat.orchestration.read")  # the name is a function
    asked: list[Any] = []
    real = read_module.open_source

    def counting(url: str, options: Any) -> Any:
        source = real(url, options)
        inner = source.read_ranges
        source.read_ranges = lambda ranges: asked.extend(ranges) or inner(ranges)
        return source

    monkeypatch.setattr(read_module, "open_source", counting)
    with Catalog(sqlite_url) as cat:
        shard = next(s for s in cat.shards(ds) if s.kind == "tar")
        rows = tar_rows(cat, shard.id)
        none = list(iter_tar_records(shard.url, rows, ["cap.txt"]))
        assert [(r.key, r.offset, dict(r.entries)) for r in none] == [
            (row.key, row.offset, {}) for row in rows
        ]
        assert asked == []
        labels = list(iter_tar_records(shard.url, rows, ["cls"]))
        assert [r["cls"].decode() for r in labels] == [str(i) for i in range(len(rows))]
        assert len(asked) == 1  # the tar's samples in one range
        # Through the stream: the captions, and still no byte of a tar.
        asked.clear()
        texts, _ = stream(cat, ds, entries=("cap.txt",))
        assert texts == {k: {"__key__": k, "cap.txt": f"caption of {k}"} for k in cat.keys(ds)}
        assert asked == []


def test_an_undecoded_bag_with_a_keyed_group_record_leaves_its_worker(client, tmp_path, sqlite_url):
    ds = make("tar", tmp_path, sqlite_url, client)
    add(sqlite_url, ds, client, shardcat.read(sqlite_url, ds).map(caption))
    add(sqlite_url, ds, client, [{"__key__": "s0_001", "cap.txt": "fixed"}], mode="replace")
    got = client.compute(shardcat.read(sqlite_url, ds, decode=False)).result(timeout=120)
    by_key = {s["__key__"]: s for s in got}
    assert by_key["s0_001"]["cap.txt"].data == b"fixed"  # read by key: a view, sent as bytes
    assert by_key["s0_002"]["cap.txt"].data == b"caption of s0_002"  # streamed
