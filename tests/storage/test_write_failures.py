"""A local shard whose file write fails mid-way: a typed error, nothing published, nothing left.

The records reach the file in 4 MiB blocks (small records) or part by part
(records over 64 KiB); both ways a failing ``write`` (here ENOSPC, injected
into the local file shardcat opens) surfaces from ``add`` as
:class:`~shardcat.errors.StorageFullError` naming the shard, the writer
refuses to go on, and leaving the ``with`` block publishes no shard and
removes the temporary file.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

import shardcat
from shardcat.errors import StorageFullError, WriterClosedError
from shardcat.storage import atomic


@pytest.fixture
def full_after(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Make the local shard file's ``write`` raise ENOSPC after ``n`` bytes went through."""

    def install(n: int) -> None:
        real = atomic._WritebackFile.write
        seen = {"bytes": 0}

        def write(self: Any, data: Any) -> int:
            if seen["bytes"] + len(data) > n:
                raise OSError(errno.ENOSPC, "No space left on device")
            seen["bytes"] += len(data)
            return real(self, data)

        monkeypatch.setattr(atomic._WritebackFile, "write", write)

    return install


@pytest.mark.parametrize(
    ("size", "count"),
    [(5_000, 2_000), (100_000, 40)],  # 4 MiB blocks of small records; large records part by part
    ids=["blocks", "large-records"],
)
def test_a_write_failing_mid_shard_is_typed_and_publishes_nothing(
    tmp_path: Path, full_after: Any, size: int, count: int
) -> None:
    full_after(1 << 20)  # the header goes through; the first block or large record does not
    url = tmp_path / "ds" / "train-000000.shard"
    w = shardcat.ShardWriter(str(url))
    added: list[int] = []

    def fill() -> None:
        with w:
            for i in range(count):
                w.add(f"k/{i:05d}", {"bin": bytes([i % 251]) * size})
                added.append(i)

    with pytest.raises(StorageFullError) as err:
        fill()
    assert "no space left" in str(err.value) and "train-000000.shard" in str(err.value)
    assert isinstance(err.value.__cause__, OSError)
    assert 0 < len(added) < count  # it failed mid-way, not at close
    with pytest.raises(WriterClosedError):
        w.add("later", {"bin": b"x"})
    with pytest.raises(WriterClosedError):
        w.close()
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == []  # no shard, no .partial


def test_a_rolling_writer_keeps_the_shards_closed_before_the_failure(
    tmp_path: Path, full_after: Any
) -> None:
    full_after(3 << 19)  # 1.5 MiB: enough for the first shard (~1 MB), not the second
    closed: list[shardcat.ShardInfo] = []

    def fill() -> None:
        with shardcat.RollingShardWriter(
            str(tmp_path), "s-{number:03d}.shard", max_bytes="1MB", on_shard_closed=closed.append
        ) as w:
            for i in range(2_000):
                w.add(f"k/{i:05d}", {"bin": bytes([i % 251]) * 5_000})

    with pytest.raises(StorageFullError):
        fill()
    assert [Path(i.path).name for i in closed] == ["s-000.shard"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s-000.shard"]
    with shardcat.ShardReader(str(tmp_path / "s-000.shard")) as r:
        r.verify()
        assert r.num_records == closed[0].record_count


@pytest.mark.skipif(
    atomic._cwrite is None or not os.path.exists("/dev/full"),
    reason="needs the compiled write-behind and /dev/full",
)
def test_a_block_failing_on_the_write_thread_is_typed_and_publishes_nothing(
    tmp_path: Path,
) -> None:
    """4 MiB blocks are written by a C thread: its ENOSPC surfaces from a later call.

    A real kernel error, not a mock: after the first records, the shard's
    file descriptor is made to point at /dev/full (every write: ENOSPC).
    """
    url = tmp_path / "ds" / "train-000000.shard"
    w = shardcat.ShardWriter(str(url))
    added: list[int] = []

    def fill() -> None:
        with w:
            for i in range(3_000):  # ~15 MB: a block fails on the thread, a later call reports it
                if i == 100:
                    full = os.open("/dev/full", os.O_WRONLY)
                    os.dup2(full, w.sink.file.fileno())
                    os.close(full)
                w.add(f"k/{i:05d}", {"bin": bytes([i % 251]) * 5_000})
                added.append(i)

    with pytest.raises(StorageFullError) as err:
        fill()
    assert "no space left" in str(err.value) and "train-000000.shard" in str(err.value)
    assert isinstance(err.value.__cause__, OSError)
    assert 100 < len(added) < 3_000
    with pytest.raises(WriterClosedError):
        w.add("later", {"bin": b"x"})
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == []


@pytest.mark.parametrize("behind", ["1", "0"])
def test_blocks_land_in_order_with_and_without_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, behind: str
) -> None:
    shardcat.config.set(write_behind=behind)
    url = str(tmp_path / "big.shard")
    payloads = [bytes([i % 251]) * (3_000 + i % 7_000) for i in range(4_000)]  # ~26 MB
    with shardcat.ShardWriter(url) as w:
        for i, p in enumerate(payloads):
            w.add(f"k/{i:05d}", {"bin": p})
    with shardcat.ShardReader(url) as r:
        r.verify()
        assert [rec["bin"].data for rec in r] == payloads


@pytest.mark.parametrize("behind", ["1", "0"])
def test_write_behind_can_be_switched_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, behind: str
) -> None:
    shardcat.config.set(write_behind=behind)
    pending = atomic.open_pending(str(tmp_path / "x.shard"))
    try:
        assert pending.file.behind is (behind == "1" and atomic._cwrite is not None)  # type: ignore[attr-defined]
    finally:
        pending.discard()


@pytest.mark.skipif(
    atomic._cwrite is None or not hasattr(os, "fork"), reason="needs the compiled write-behind"
)
def test_a_forked_child_never_waits_for_the_parents_write_thread(tmp_path: Path) -> None:
    """A child forked while a block is in flight drops its copy of the handle; the parent's shard is whole."""
    url = str(tmp_path / "forked.shard")
    payloads = [bytes([i % 251]) * 5_000 for i in range(2_000)]
    w = shardcat.ShardWriter(url)
    i = 0
    while w.sink.file._pending is None:  # type: ignore[attr-defined]
        w.add(f"k/{i:05d}", {"bin": payloads[i]})
        i += 1
    pid = os.fork()
    if pid == 0:  # the child: give up its copy of the writer, without touching the parent's file
        try:
            w.sink.file._wait()  # type: ignore[attr-defined]
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with w:
        for j in range(i, len(payloads)):
            w.add(f"k/{j:05d}", {"bin": payloads[j]})
    with shardcat.ShardReader(url) as r:
        r.verify()
        assert [rec["bin"].data for rec in r] == payloads


@pytest.mark.parametrize("behind", ["1", "0"])
def test_position_counts_a_block_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, behind: str
) -> None:
    """``tell``/``seek`` wait for the block on the thread: positions are the file's, never stale."""
    shardcat.config.set(write_behind=behind)
    pending = atomic.open_pending(str(tmp_path / "x.shard"))
    f: Any = pending.file
    try:
        block = b"a" * (4 << 20)
        f.write(b"head")
        f.write(block)  # on the thread, where built
        assert f.tell() == 4 + len(block)
        f.write(block)
        assert f.seek(0, os.SEEK_END) == 4 + 2 * len(block)
        f.write(b"tail")
        f.flush()
        assert os.path.getsize(pending._temp) == 8 + 2 * len(block)  # type: ignore[attr-defined]
    finally:
        pending.discard()
