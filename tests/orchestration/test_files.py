"""Packing files: listing and key rule on the client, reads on the workers, shards planned by bytes."""

from __future__ import annotations

import fsspec.implementations.local as fs_local
import pytest

import shardcat
from shardcat.errors import (
    DuplicateKeyError,
    EmptySourceError,
    SourceIsShardsError,
    StorageError,
    UnmatchedFilesError,
)
from shardcat.orchestration import files as files_module
from shardcat.orchestration.files import (
    SampleFiles,
    from_files,
    list_source,
    plan_partitions,
    read_samples,
    sample_parts,
)
from shardcat.reading import Catalog


def make_tree(root, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


@pytest.mark.parametrize(
    ("relpath", "rule", "expected"),
    [
        ("a/b/img001.jpg", "first-dot", ("a/b/img001", "jpg")),
        ("x.seg.png", "first-dot", ("x", "seg.png")),
        ("x.seg.png", "last-dot", ("x.seg", "png")),
        ("d.v2/x.json", "first-dot", ("d.v2/x", "json")),
        ("pip-23.2.1-py3-none-any.whl", "first-dot", ("pip-23", "2.1-py3-none-any.whl")),
        ("pip-23.2.1-py3-none-any.whl", "last-dot", ("pip-23.2.1-py3-none-any", "whl")),
        ("README", "first-dot", None),
        ("README", "last-dot", None),
        ("a/trailing.", "first-dot", None),
    ],
)
def test_key_rules(relpath, rule, expected):
    assert sample_parts(relpath, rule) == expected


def test_listing_groups_files_by_key_sorted_and_counts_hidden_ones(tmp_path):
    make_tree(
        tmp_path,
        {
            "a/b/img1.jpg": b"J1",
            "a/b/img1.cls": b"3",
            "a/b/img1-x.jpg": b"JX",
            "a/.hidden.jpg": b"H",
            ".git/config.txt": b"G",
            "top.seg.png": b"S",
            "top.txt": b"TT",
        },
    )
    listing = list_source(from_files(str(tmp_path)))
    assert [s.key for s in listing.samples] == ["a/b/img1", "a/b/img1-x", "top"]
    top = listing.samples[-1]
    assert [e for e, _ in top.files] == ["seg.png", "txt"]
    assert top.size == 3
    assert (listing.files, listing.bytes, listing.hidden) == (5, 8, 2)
    # Paths are absolute: a worker started in another folder reads the same files.
    assert all(p.startswith(str(tmp_path)) for s in listing.samples for _, p in s.files)


def test_files_without_an_extension_are_an_error_unless_a_choice_is_made(tmp_path):
    make_tree(tmp_path, {"README": b"r", "src/ChangeLog": b"c", "src/a.py": b"a"})
    with pytest.raises(UnmatchedFilesError, match=r"^2 files .* README, src/ChangeLog; ") as e:
        list_source(from_files(str(tmp_path)))
    assert e.value.paths == ["README", "src/ChangeLog"]
    # What to do, in each interface's terms: keywords in Python, flags on the command line.
    assert "no_ext_entry=" in str(e.value) and "skip_unmatched=True" in str(e.value)
    assert "--no-ext-entry" in e.value.hint.cli and "--skip-unmatched" in e.value.hint.cli

    kept = list_source(from_files(str(tmp_path), no_ext_entry="txt"))
    assert {(s.key, s.files[0][0]) for s in kept.samples} == {
        ("README", "txt"),
        ("src/ChangeLog", "txt"),
        ("src/a", "py"),
    }
    skipped = list_source(from_files(str(tmp_path), skip_unmatched=True))
    assert [s.key for s in skipped.samples] == ["src/a"]
    assert skipped.skipped == ["README", "src/ChangeLog"]


def test_two_files_for_one_key_and_entry_are_an_error(tmp_path):
    make_tree(tmp_path, {"x": b"1", "x.txt": b"2"})
    with pytest.raises(DuplicateKeyError, match=r"^x and x.txt both map to key 'x', entry 'txt'"):
        list_source(from_files(str(tmp_path), no_ext_entry="txt"))


def test_an_empty_or_missing_source_is_an_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(EmptySourceError, match=r"nothing to pack at .*empty: no file there"):
        list_source(from_files(str(tmp_path / "empty")))
    with pytest.raises(EmptySourceError, match=r"nothing to pack at .*missing"):
        list_source(from_files(str(tmp_path / "missing")))
    make_tree(tmp_path, {"only/.DS_Store": b"x"})
    with pytest.raises(EmptySourceError, match="it holds 1 hidden and 0 skipped files"):
        list_source(from_files(str(tmp_path / "only")))


def test_globs_and_braces_keep_keys_relative_to_the_fixed_part(tmp_path):
    make_tree(
        tmp_path,
        {
            "train/a.jpg": b"1",
            "train/a.cls": b"2",
            "val/a.jpg": b"3",
            "test/a.jpg": b"4",
        },
    )
    listing = list_source(from_files(f"{tmp_path}/{{train,val}}/"))
    assert [s.key for s in listing.samples] == ["train/a", "val/a"]
    listing = list_source(from_files(f"{tmp_path}/*/a.jpg"))
    assert [s.key for s in listing.samples] == ["test/a", "train/a", "val/a"]
    # One alternative with nothing behind it fails the pack instead of dropping it.
    with pytest.raises(EmptySourceError, match=r"nothing to pack at .*/nope/ \(an alternative of"):
        list_source(from_files(f"{tmp_path}/{{train,nope}}/"))


def test_partitions_are_planned_by_bytes():
    samples = [
        SampleFiles(f"k{i:05d}", (("bin", f"/x/k{i:05d}.bin"),), 2000) for i in range(16_667)
    ]
    parts = plan_partitions(samples, 1_000_000)
    sizes = [sum(s.estimated_bytes() for s in p) for p in parts]
    assert all(900_000 < size <= 1_000_000 for size in sizes[:-1])
    assert [s for p in parts for s in p] == samples  # in order, none lost
    # A file too big for any shard gets its own, and the small ones around it stay together.
    big = SampleFiles("big", (("bin", "/x/big.bin"),), 5_000_000)
    assert plan_partitions([samples[0], big, samples[1]], 1_000_000) == [
        [big],
        [samples[0], samples[1]],
    ]
    mixed = [*samples[:300], big, *samples[300:1000]]
    parts = plan_partitions(mixed, 1_000_000)
    assert parts[0] == [big]
    assert [len(p) for p in parts[1:]] == [
        len(p) for p in plan_partitions(samples[:1000], 1_000_000)
    ]
    assert sorted(s.key for p in parts for s in p) == sorted(s.key for s in mixed)


def test_a_file_gone_after_the_listing_is_a_storage_error_naming_it(tmp_path):
    make_tree(tmp_path, {"a.txt": b"a", "b.txt": b"b"})
    listing = list_source(from_files(str(tmp_path)))
    (tmp_path / "b.txt").unlink()
    with pytest.raises(StorageError, match=r"cannot read source file .*b\.txt.*after the listing"):
        list(read_samples(listing.samples, listing.root_url, {}))


@pytest.fixture
def no_client_reads(monkeypatch):
    """Fail any local file read in this (the client's) process: the workers must read."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"the client read a file: {args[1:2]}")

    monkeypatch.setattr(fs_local.LocalFileSystem, "_open", refuse)
    monkeypatch.setattr(fs_local.LocalFileSystem, "cat_file", refuse)
    monkeypatch.setattr(files_module, "read_whole", refuse)


def test_workers_read_the_files_and_shards_come_out_near_the_requested_size(
    client, tmp_path, sqlite_url, no_client_reads
):
    src = tmp_path / "src"
    files = {f"d{i // 1000}/f{i:05d}.bin": bytes([i % 251]) * (1500 + i % 700) for i in range(5000)}
    files.update({f"d{i // 1000}/f{i:05d}.json": b'{"i": %d}' % i for i in range(0, 5000, 7)})
    make_tree(src, files)
    events = []
    summary = shardcat.write(
        from_files(str(src)),
        str(tmp_path / "out"),
        catalog=sqlite_url,
        dataset="pack",
        shard_size="1MB",
        client=client,
        progress=events.append,
    )
    assert summary.records == 5000
    # The total is known once the listing is done: from the first event on.
    assert {e.total_partitions for e in events} == {summary.partitions}
    assert summary.partitions == len(summary.shards) > 5
    cat = Catalog(sqlite_url)
    sizes = sorted(s.size_bytes for s in cat.shards("pack"))
    assert all(0.9e6 < size <= 1e6 for size in sizes[1:]), sizes  # all but the last one
    rec = cat.get("pack", "d3/f03500")
    assert rec["bin"].data == files["d3/f03500.bin"]
    assert rec["json"].decode() == {"i": 3500}


def test_a_source_on_s3_with_a_brace_pattern(client, s3, tmp_path, sqlite_url):
    import s3fs

    fs = s3fs.S3FileSystem(**s3["storage_options"])
    data = {
        f"{s3['bucket']}/raw/part-{p}/s{i:03d}.txt": b"p%d-%d" % (p, i)
        for p in range(3)
        for i in range(40)
    }
    fs.pipe(data)
    summary = shardcat.write(
        from_files(f"{s3['url']}/raw/part-{{0..1}}/", storage_options=s3["storage_options"]),
        str(tmp_path / "out"),
        catalog=sqlite_url,
        dataset="s3src",
        client=client,
        progress=False,
    )
    assert summary.records == 80  # part-2 is not in the pattern
    cat = Catalog(sqlite_url)
    assert cat.get("s3src", "part-1/s039")["txt"].data == b"p1-39"
    assert cat.get_many("s3src", ["part-2/s000"]).missing == ["part-2/s000"]


def test_an_empty_source_creates_nothing(client, tmp_path, sqlite_url):
    (tmp_path / "src").mkdir()
    with pytest.raises(EmptySourceError):
        shardcat.write(
            from_files(str(tmp_path / "src")),
            str(tmp_path / "out"),
            catalog=sqlite_url,
            dataset="none",
            client=client,
            progress=False,
        )
    assert Catalog(sqlite_url).datasets() == []


def test_a_folder_of_shards_as_the_source_is_refused_naming_the_swap(tmp_path, sqlite_url):
    """`shardcat write shards/images ../data/copy`: SRC and URL swapped, caught before writing."""
    import subprocess
    import sys

    data = tmp_path / "data"
    data.mkdir()
    for i in range(3):
        (data / f"s{i}.json").write_text(f'{{"i": {i}}}')
    shards = tmp_path / "shards"
    shardcat.write(
        from_files(str(data)), str(shards), catalog=sqlite_url, dataset="d", progress=False
    )
    before = sorted(p.name for p in data.iterdir())
    cli = [sys.executable, "-m", "shardcat", "-c", sqlite_url]
    p = subprocess.run(
        [*cli, "write", str(shards), str(data / "copy"), "-d", "copy", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 1, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "holds only shardcat shards" in p.stderr and "did you swap SRC and URL" in p.stderr
    assert sorted(p.name for p in data.iterdir()) == before  # nothing written into the source
    assert [d.name for d in Catalog(sqlite_url).datasets()] == ["d"]
    with pytest.raises(SourceIsShardsError, match=r"shardcat\.copy_dataset"):
        shardcat.write(
            from_files(str(shards)), str(data / "copy"), catalog=sqlite_url, dataset="copy"
        )
