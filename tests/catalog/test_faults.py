"""The read side under faults: dropped database connections, records over the pread cap."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

import shardcat
from shardcat import _pread
from shardcat.reading import Catalog

from .helpers import make_dataset, sample, shard_keys


def _terminate(url: str, pid: int) -> None:
    """Drop one server connection, as a restart, failover or idle timeout would."""
    admin = sa.create_engine(url)
    try:
        with admin.begin() as conn:
            assert conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar()
    finally:
        admin.dispose()


def test_lookups_reconnect_once_after_the_server_drops_the_connection(postgres_url, local_root):
    cat = Catalog(postgres_url)
    make_dataset(cat, local_root, 2)
    key = shard_keys(1)[3]
    assert cat.get("train", key).key == key
    assert cat.get("train", key)["jpg"].data == sample(key)["jpg"]
    for call in (
        lambda: cat.get("train", key),
        lambda: cat.get("train", key, entries=["txt"]),
        lambda: cat.get_many("train", [key, shard_keys(0)[1]]).records,
        lambda: cat.locate("train", key),
    ):
        before = call()
        _terminate(postgres_url, cat._lookup().raw.conn.info.backend_pid)
        # Transparently reconnected, same thread, same lookup: the same answer.
        assert call() == before
    # Other threads' lookups recover too (each has its own connection).
    errors: list[BaseException] = []

    def other_thread() -> None:
        try:
            assert cat.get("train", key).key == key
            _terminate(postgres_url, cat._lookup().raw.conn.info.backend_pid)
            assert cat.get("train", key).key == key
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join(timeout=60)
    assert errors == []
    cat.close()


def test_units_of_work_recover_after_the_server_drops_pooled_connections(postgres_url, local_root):
    cat = Catalog(postgres_url)
    make_dataset(cat, local_root, 1)
    with cat.engine.connect() as conn:  # the pooled connection the next unit of work gets
        pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
    _terminate(postgres_url, pid)
    assert cat.info("train").name == "train"
    assert len(cat.shards("train")) == 1
    cat.close()


def test_a_short_pread_is_continued_not_reported_as_a_changed_shard(cat, local_root, monkeypatch):
    """The kernel returns at most PREAD_MAX bytes per call; a lookup must read on."""
    make_dataset(cat, local_root, 1)
    monkeypatch.setattr(_pread, "PREAD_MAX", 1000)  # every record now needs several reads
    for key in shard_keys(0)[:5]:
        assert cat.get("train", key).decode() == {"__key__": key, **sample(key)}
    assert cat.get_many("train", shard_keys(0)).ok
    assert cat.verify("train").ok
    with shardcat.ShardReader(cat.shards("train")[0].url) as r:  # no catalog: the file source
        assert r.get(shard_keys(0)[7]).decode() == {
            "__key__": shard_keys(0)[7],
            **sample(shard_keys(0)[7]),
        }


def _big_folder() -> str:
    # A 2 GiB record: tmpfs keeps the test's fsync and disk use out of the picture.
    shm = Path("/dev/shm")
    if shm.is_dir() and os.statvfs(shm).f_bavail * os.statvfs(shm).f_frsize > 8 << 30:
        return tempfile.mkdtemp(dir=shm, prefix="shardcat-big-")
    return tempfile.mkdtemp(prefix="shardcat-big-")


@pytest.mark.slow
def test_a_record_over_2_gib_is_read_by_random_access(sqlite_url):
    folder = _big_folder()
    url = os.path.join(folder, "big-000000.shard")
    size = _pread.PREAD_MAX + (1 << 20)  # past the kernel's per-call cap
    try:
        with shardcat.ShardWriter(url) as w:
            w.add("small", {"txt": "before"})
            w.add("big", {"bin": bytes(size)})
            w.add("after", {"txt": "after"})
        cat = Catalog(sqlite_url)
        cat.create_dataset("big", folder)
        cat.register_shard("big", w.close())
        record = cat.get("big", "big")
        assert len(record["bin"].data) == size
        del record
        assert cat.get("big", "after")["txt"].decode() == "after"
        cat.close()
    finally:
        shutil.rmtree(folder)  # the shard and the dataset's history (_versions/)
