"""Publication: atomic, synced, and — when exclusive — never over an existing object."""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from pathlib import Path
from typing import Any

import fsspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
)

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


def test_exclusive_multipart_upload_is_refused_at_completion(s3, monkeypatch):
    """Through s3fs large objects go up in parts; S3 checks If-None-Match when the upload
    completes. (obstore's one exclusive PUT: tests/storage/test_s3_upload.py.)"""
    # What is checked is the refusal, not the speed: an 18 MiB upload to moto on a loaded
    # machine can take longer than the suite's 3-s deadline (tests/conftest.py).
    shardcat.config.set(s3_transport="fsspec", storage_retry_deadline=60)
    url, opts = f"{s3['url']}/big/x.bin", s3["storage_options"]
    fs, path = fsspec.core.url_to_fs(url, **opts)
    fs.pipe_file(path, b"original")
    pending = open_pending(url, opts, exclusive=True)
    pending._fs.invalidate_cache()
    for _ in range(3):  # 18 MiB: more than the two 8 MiB parts that start a multipart upload
        pending.file.write(os.urandom(6 << 20))
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


class PublicationModel(RuleBasedStateMachine):
    """Pending files opened, written, committed and discarded in any order and interleaving.

    The model: a name holds the bytes of the first exclusive commit to it (or the
    last plain one); an exclusive commit to a taken name raises and changes
    nothing; nothing is visible before its commit, and no temporary file outlives
    a commit or discard.
    """

    names = Bundle("names")
    pendings = Bundle("pendings")

    def __init__(self) -> None:
        super().__init__()
        self.root = f"/tmp/shardcat-pubmodel-{uuid.uuid4().hex[:10]}"
        self.memory = f"memory://pubmodel-{uuid.uuid4().hex[:10]}"
        self.published: dict[str, bytes] = {}
        self.open: list[Any] = []

    @initialize(target=names)
    def first_name(self) -> str:
        return "a.shard"

    @rule(target=names, name=st.sampled_from(["b.shard", "c.shard", "sub/d.shard"]))
    def another_name(self, name: str) -> str:
        return name

    @rule(
        target=pendings,
        name=names,
        where=st.sampled_from(["local", "memory"]),
        exclusive=st.booleans(),
        data=st.binary(max_size=64),
    )
    def open_and_write(self, name: str, where: str, exclusive: bool, data: bytes) -> Any:
        url = f"{self.root}/{name}" if where == "local" else f"{self.memory}/{name}"
        pending = open_pending(url, exclusive=exclusive)
        pending.file.write(data)
        self.open.append(pending)
        return (pending, url, exclusive, data)

    @rule(item=consumes(pendings))
    def commit(self, item: Any) -> None:
        pending, url, exclusive, data = item
        self.open.remove(pending)
        if exclusive and url in self.published:
            with pytest.raises(ObjectExistsError):
                pending.commit()
        else:
            pending.commit()
            self.published[url] = data

    @rule(item=consumes(pendings))
    def discard(self, item: Any) -> None:
        pending, *_ = item
        self.open.remove(pending)
        pending.discard()

    @invariant()
    def names_hold_what_was_published(self) -> None:
        for url, data in self.published.items():
            fs, path = fsspec.core.url_to_fs(url)
            assert fs.cat_file(path) == data, url
        for name in ("a.shard", "b.shard", "c.shard", "sub/d.shard"):
            for url in (f"{self.root}/{name}", f"{self.memory}/{name}"):
                fs, path = fsspec.core.url_to_fs(url)
                assert fs.exists(path) == (url in self.published), url

    def teardown(self) -> None:
        for pending in self.open:
            pending.discard()
        # Every temporary file is gone once its pending file is committed or discarded.
        left = [p for p in Path(self.root).rglob(".*.partial")] if os.path.isdir(self.root) else []
        assert left == []
        shutil.rmtree(self.root, ignore_errors=True)
        fs, path = fsspec.core.url_to_fs(self.memory)
        if fs.exists(path):
            fs.rm(path, recursive=True)


PublicationModel.TestCase.settings = settings(
    max_examples=40, stateful_step_count=20, deadline=None
)
test_publication_follows_the_write_once_model = PublicationModel.TestCase


def test_a_local_file_written_back_as_it_goes_publishes_every_byte(tmp_path):
    """Local files start their disk write every few MiB; the published bytes are the written ones."""
    url = str(tmp_path / "big.bin")
    data = os.urandom(19 << 20)
    pending = open_pending(url)
    for i in range(0, len(data), 3 << 20):  # writes that straddle the 8 MiB write-back steps
        pending.file.write(data[i : i + (3 << 20)])
    pending.file.write(b"")
    pending.commit()
    with open(url, "rb") as f:
        assert f.read() == data
