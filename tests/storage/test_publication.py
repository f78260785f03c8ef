"""Publication: atomic, synced, and — when exclusive — never over an existing object."""

from __future__ import annotations

import os
import threading
import uuid
from typing import Any

import fsspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

import shardcat
from shardcat.errors import ObjectExistsError
from shardcat.storage import dataset_prefix, open_pending, shard_name
from shardcat.storage.locations import MAX_PREFIX


@pytest.fixture(params=["local", "memory", "s3"])
def target(request: pytest.FixtureRequest, tmp_path: Any) -> dict[str, Any]:
    if request.param == "local":
        return {"url": str(tmp_path / "x.shard"), "storage_options": None}
    if request.param == "memory":
        return {"url": f"memory://pub-{uuid.uuid4().hex[:8]}/x.shard", "storage_options": None}
    s3 = request.getfixturevalue("s3")
    return {"url": f"{s3['url']}/pub/x.shard", "storage_options": s3["storage_options"]}


def _write(url: str, opts: Any, value: str, **kw: Any) -> shardcat.ShardInfo:
    with shardcat.ShardWriter(url, storage_options=opts, **kw) as w:
        w.add("k", {"txt": value})
    return w.close()


def _value(url: str, opts: Any) -> str:
    with shardcat.ShardReader(url, storage_options=opts) as r:
        return str(r.get("k")["txt"].decode())


def test_exclusive_publication_never_replaces_an_existing_object(target):
    url, opts = target["url"], target["storage_options"]
    _write(url, opts, "first", exclusive=True)
    with pytest.raises(ObjectExistsError, match="never replaces"):
        _write(url, opts, "second", exclusive=True)
    assert _value(url, opts) == "first"
    # A plain writer replaces, like open(path, "wb").
    _write(url, opts, "third")
    assert _value(url, opts) == "third"


def test_exclusive_multipart_upload_is_refused_at_completion(s3):
    """Large objects go up in parts; S3 checks If-None-Match when the upload completes."""
    url, opts = f"{s3['url']}/big/x.bin", s3["storage_options"]
    fs, path = fsspec.core.url_to_fs(url, **opts)
    fs.pipe_file(path, b"original")
    pending = open_pending(url, opts, exclusive=True)
    pending._fs.invalidate_cache()
    for _ in range(3):  # 15 MiB: three parts of the 5 MiB minimum
        pending.file.write(os.urandom(5 << 20))
    with pytest.raises(ObjectExistsError):
        pending.commit()
    assert fs.cat_file(path) == b"original"
    assert fs.ls(f"{s3['bucket']}/big") == [path]


def test_two_exclusive_writers_race_for_one_name_and_exactly_one_wins(tmp_path):
    url = str(tmp_path / "race.shard")
    barrier = threading.Barrier(8)
    outcome: list[str] = []

    def writer(i: int) -> None:
        w = shardcat.ShardWriter(url, exclusive=True)
        w.add("k", {"txt": f"writer {i}"})
        barrier.wait(timeout=10)
        try:
            w.close()
            outcome.append(f"writer {i}")
        except ObjectExistsError:
            outcome.append("refused")

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    winners = [o for o in outcome if o != "refused"]
    assert len(outcome) == 8 and len(winners) == 1
    assert _value(url, None) == winners[0]
    assert [p.name for p in tmp_path.iterdir()] == ["race.shard"]  # no temporaries left


def test_local_publication_syncs_the_data_before_the_name_and_the_folder_after(
    tmp_path, monkeypatch
):
    events: list[str] = []
    real_fsync, real_link, real_replace = os.fsync, os.link, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync-folder" if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync-file")
        real_fsync(fd)

    def link(src: str, dst: str) -> None:
        events.append("link")
        real_link(src, dst)

    def replace(src: str, dst: str) -> None:
        events.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    monkeypatch.setattr(os, "replace", replace)
    _write(str(tmp_path / "a.shard"), None, "a", exclusive=True)
    assert events == ["fsync-file", "link", "fsync-folder"]
    events.clear()
    _write(str(tmp_path / "b.shard"), None, "b")
    assert events == ["fsync-file", "replace", "fsync-folder"]


# --- names -------------------------------------------------------------------


def _unescape(prefix: str) -> str:
    out = bytearray()
    i = 0
    while i < len(prefix):
        if prefix[i] == "~":
            out.append(int(prefix[i + 1 : i + 3], 16))
            i += 3
        else:
            out += prefix[i].encode()
            i += 1
    return out.decode("utf-8")


@given(st.text(min_size=1, max_size=30))
def test_dataset_prefixes_are_plain_file_names_and_can_be_undone(name):
    prefix = dataset_prefix(name)
    assert "/" not in prefix and "\\" not in prefix and not prefix.startswith(".")
    assert all(c.isascii() and (c.isalnum() or c in "._-~") for c in prefix)
    if len(prefix) < MAX_PREFIX:
        assert _unescape(prefix) == name  # injective: distinct names, distinct prefixes


@given(st.text(min_size=MAX_PREFIX, max_size=300), st.text(min_size=MAX_PREFIX, max_size=300))
def test_long_dataset_names_keep_distinct_bounded_prefixes(a, b):
    pa, pb = dataset_prefix(a), dataset_prefix(b)
    assert len(pa) <= MAX_PREFIX and len(pb) <= MAX_PREFIX
    assert (pa == pb) == (a == b)


def test_look_alike_names_get_distinct_prefixes():
    names = ["a/b", "a_b", "a b", "a~2Fb", "A/B", "../a_b", ".hidden", "ünï/cödé"]
    assert len({dataset_prefix(n) for n in names}) == len(names)
    assert dataset_prefix("imagenet/train") == "imagenet~2Ftrain"
    assert shard_name("train", 17, 3, 0) == "train-j17-000003-000.shard"
    assert shard_name("train", 17, 3, 0, attempt=2) == "train-j17-000003-000-r2.shard"
