"""Batched deletes: one ``fs.rm`` per filesystem, and each file left over reported."""

from __future__ import annotations

import pytest

import shardcat
from shardcat.orchestration.gc import delete_dataset
from shardcat.storage import resolve
from shardcat.storage.removal import existing_urls, remove_files


def put(url, options=None, data=b"x"):
    fs, path = resolve(url, options)
    fs.pipe_file(path, data)


@pytest.fixture
def rm_calls(monkeypatch):
    """Every ``rm`` call of s3fs, with the paths it was given."""
    import s3fs

    calls: list[list[str]] = []
    real = s3fs.S3FileSystem.rm

    def rm(self, path, *args, **kwargs):
        calls.append(list(path) if isinstance(path, list) else [path])
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "rm", rm)
    return calls


def test_s3_files_are_removed_in_one_call(s3, rm_calls):
    opts = s3["storage_options"]
    urls = [f"{s3['url']}/ds/f-{i:04d}.shard" for i in range(60)]
    for url in urls[:50]:
        put(url, opts)
    result = remove_files(urls, opts)
    assert sorted(result.removed) == urls[:50]
    assert sorted(result.missing) == urls[50:]
    assert result.failed == {}
    assert len(rm_calls) == 1 and len(rm_calls[0]) == 50  # one DeleteObjects request
    assert existing_urls(urls, opts) == set()


def test_a_file_that_cannot_be_removed_is_reported(tmp_path):
    root = tmp_path / "ds"
    root.mkdir()
    ok = [str(root / f"a-{i}.shard") for i in range(3)]
    for p in ok:
        put(p)
    stuck = root / "b-0.shard"  # a folder with a shard's name: a plain rm refuses it
    stuck.mkdir()
    (stuck / "inside").write_bytes(b"x")
    result = remove_files([*ok, str(stuck)])
    assert sorted(result.removed) == ok
    assert list(result.failed) == [str(stuck)]
    assert stuck.exists()


def test_delete_dataset_on_s3_is_one_batched_delete(s3, rm_calls, tmp_path):
    opts = s3["storage_options"]
    root = f"{s3['url']}/datasets/d"
    urls = [f"{root}/d-{i:06d}.shard" for i in range(5)]
    for url in urls:
        with shardcat.ShardWriter(url, storage_options=opts) as w:
            w.add(url.rsplit("/", 1)[1], {"txt": "x"})
    catalog = f"sqlite:///{tmp_path / 'c.db'}"
    with shardcat.Catalog(catalog, storage_options=opts, create=True) as cat:
        cat.create_dataset("d", root)
        cat.reindex("d", urls)
        dry = delete_dataset(cat, "d", dry_run=True)
        assert sorted(dry.removed) == urls and rm_calls == []
        fs, path = resolve(urls[0], opts)
        fs.rm_file(path)  # one is gone already
        rm_calls.clear()
        report = delete_dataset(cat, "d")
        assert sorted(report.removed) == urls[1:] and report.missing == [urls[0]]
        # One request: the four shard objects and the version's manifest (docs/LIFECYCLE.md §8).
        assert len(rm_calls) == 1 and len(rm_calls[0]) == 5
        assert [d.name for d in cat.datasets()] == []
    assert existing_urls(urls, opts) == set()


def test_a_file_another_remover_took_meanwhile_does_not_stop_the_others(tmp_path, monkeypatch):
    """Two gc runs at once: the listing says every file is there, but one is gone by the rm.

    Before, the local rm stopped at the missing file: the files after it stayed, each
    reported as failed with the missing one's error, and gc then dropped their rows
    (found by the concurrent-history checker: tests/reliability/test_history.py).
    """
    import shardcat.storage.removal as removal

    root = tmp_path / "ds"
    root.mkdir()
    urls = [str(root / f"a-{i}.shard") for i in range(4)]
    for p in urls[1:]:
        put(p)
    real, calls = removal.existing, []

    def listing(fs, paths):  # the first listing is stale: it still sees the gone file
        calls.append(1)
        return {p.rstrip("/") for p in paths} if len(calls) == 1 else real(fs, paths)

    monkeypatch.setattr(removal, "existing", listing)
    result = remove_files(urls)
    assert result.failed == {}
    assert sorted(result.removed) == urls
    assert existing_urls(urls) == set()
