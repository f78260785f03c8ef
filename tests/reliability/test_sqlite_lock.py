"""A SQLite catalog write-locked by another process while jobs commit and lookups run.

The other process is a plain ``sqlite3`` client that takes the write lock
(``BEGIN IMMEDIATE`` or ``BEGIN EXCLUSIVE``) and holds it until told to let
go, or until it is SIGKILLed. Meanwhile: lookups are served (WAL: readers
never wait for the writer); a commit whose busy timeout outlasts the lock
waits and then lands; one whose timeout runs out fails with a typed
``CatalogLockedError`` that says what to do, leaves nothing visible, and the
same job commits when retried after the lock is gone.

Bounded: every wait has a timeout.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

import shardcat
from shardcat.errors import CatalogLockedError
from shardcat.reading import Catalog

PER_SHARD, SHARDS, LOOKUPS = 200, 2, 20

HOLDER = textwrap.dedent(
    """
    import sqlite3, sys
    db = sqlite3.connect(sys.argv[1], isolation_level=None)
    db.execute("BEGIN " + sys.argv[2])
    db.execute("UPDATE datasets SET name = name")  # a write: the lock is really taken
    print("LOCKED", flush=True)
    sys.stdin.readline()  # until the test says so (or SIGKILLs us)
    db.execute("ROLLBACK")
    """
)


class Holder:
    """Another process holding the catalog's write lock."""

    def __init__(self, path: str, mode: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, path, mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "LOCKED"

    def release(self, kill: bool = False) -> None:
        if kill:
            self.proc.kill()
        else:
            assert self.proc.stdin is not None
            self.proc.stdin.write("go\n")
            self.proc.stdin.flush()
        self.proc.wait(timeout=30)


def _keys(tag: str) -> list[str]:
    return [f"{tag}/{s}/{i:04d}" for s in range(SHARDS) for i in range(PER_SHARD)]


def _stage(cat: Catalog, root: Path, tag: str) -> Any:
    """A job of two staged shards (keys ``tag/...``), not yet committed."""
    job = cat.begin_job("locked")
    for s in range(SHARDS):
        with shardcat.ShardWriter(str(root / f"{tag}-{s}.shard")) as w:
            for i in range(PER_SHARD):
                key = f"{tag}/{s}/{i:04d}"
                w.write({"__key__": key, "txt": key})
        cat.register_shard("locked", w.close(), job=job)
    return job


def _served(cat: Catalog, keys: list[str]) -> int:
    """Lookups during the lock: each returns exactly the committed records."""
    for _ in range(LOOKUPS // 2):
        got = cat.get_many("locked", keys)
        assert got.ok and all(r["txt"].decode() == k for k, r in got.found().items())
        assert cat.get("locked", keys[-1])["txt"].decode() == keys[-1]
    return LOOKUPS


@pytest.fixture
def locked(sqlite_url: str, tmp_path: Path) -> Any:
    root = tmp_path / "ds"
    root.mkdir()
    with Catalog(sqlite_url) as cat:
        cat.create_dataset("locked", str(root))
        cat.commit_job(_stage(cat, root, "base"))
    return sqlite_url.removeprefix("sqlite:///"), root


@pytest.mark.parametrize("mode", ["IMMEDIATE", "EXCLUSIVE"])
@pytest.mark.parametrize("release", ["release", "kill"])
def test_a_commit_waits_for_the_lock_and_lands(
    locked: Any, sqlite_url: str, mode: str, release: str
) -> None:
    path, root = locked
    with Catalog(sqlite_url, busy_timeout=120) as cat:
        job = _stage(cat, root, "new")
        holder = Holder(path, mode)
        outcome: list[Any] = []
        committer = threading.Thread(
            target=lambda: outcome.append(cat.commit_job(job)), daemon=True
        )
        committer.start()
        with Catalog(sqlite_url) as reader:
            served = _served(reader, _keys("base"))
            # The commit waits for the lock: its job is not visible meanwhile.
            assert reader.count("locked") == SHARDS * PER_SHARD
            assert reader.get_many("locked", _keys("new")).found() == {}
        assert committer.is_alive() and outcome == []  # still waiting after the lookups
        holder.release(kill=release == "kill")
        committer.join(120)
        assert [j.state for j in outcome] == ["committed"]
        assert cat.count("locked") == 2 * SHARDS * PER_SHARD
        assert cat.get_many("locked", _keys("new")).ok
        assert cat.verify("locked", workers=1).ok
    print(f"{mode}, {release}: {served} lookups served during the lock, 1 commit waited and landed")


@pytest.mark.parametrize("mode", ["IMMEDIATE", "EXCLUSIVE"])
def test_a_commit_past_its_busy_timeout_fails_typed_and_its_retry_lands(
    locked: Any, sqlite_url: str, mode: str
) -> None:
    path, root = locked
    with Catalog(sqlite_url, busy_timeout=0.2) as cat:
        job = _stage(cat, root, "new")
        holder = Holder(path, mode)
        try:
            with pytest.raises(CatalogLockedError, match=r"locked by another process") as err:
                cat.commit_job(job)
            # It says what happened and what to do.
            assert "0.2 s" in str(err.value) and "busy_timeout" in str(err.value)
            with pytest.raises(CatalogLockedError):
                cat.begin_job("locked")
            served = _served(cat, _keys("base"))
            assert cat.count("locked") == SHARDS * PER_SHARD  # nothing half-visible
            assert cat.get_many("locked", _keys("new")).found() == {}
            assert cat.job(job.id).state == "open"
        finally:
            holder.release()
        # Retryable: the same job commits once the lock is gone.
        assert cat.commit_job(job).state == "committed"
        assert cat.count("locked") == 2 * SHARDS * PER_SHARD
        keys = list(cat.keys("locked"))
        assert len(keys) == len(set(keys)) == 2 * SHARDS * PER_SHARD
        assert cat.verify("locked", workers=1).ok
    print(f"{mode}: 2 writes refused typed, {served} lookups served, the retried commit landed")
