"""Descriptor lifetimes (issue 30): a read in flight never reads another file through a reused number.

``pread`` runs without the GIL; a descriptor closed by another thread
meanwhile, and its number taken by the next ``open``, would read that other
file's bytes. Readers hold a :class:`~shardcat.format.sources.FileSource`'s
descriptor (``held()``) and ``close()`` waits for the last of them; a batch
over more shards than a lookup keeps open reads each file while it is open.

Before the fixes (2-core VM of issue 30): threads reading one shared
``FileSource`` while another thread closed and replaced it 2,000 times,
opening other files meanwhile, got another file's bytes in 10 of 10 runs
(4-9 wrong reads each; now 0); ``get_many`` over 6 shards with
``max_open_shards=2`` failed with ``StorageError`` (EBADF: opening the last
shards closed the first ones' descriptors) in 3 of 3 runs.
"""

from __future__ import annotations

import errno
import os
import random
import threading
from pathlib import Path

import numpy as np
import pytest

from catalog.helpers import make_dataset, sample, shard_keys
from shardcat.format import recordcodec
from shardcat.format.sources import FileSource
from shardcat.reading import Catalog

SIZE = 1 << 16
FILES = 6
ROUNDS = 2000
JOIN_TIMEOUT = 60.0


@pytest.fixture
def files(tmp_path: Path) -> dict[str, bytes]:
    """Files of distinct random bytes, by path."""
    out = {}
    for i in range(FILES):
        path = tmp_path / f"f{i}.bin"
        data = random.Random(i).randbytes(SIZE)
        path.write_bytes(data)
        out[str(path)] = data
    return out


def test_reads_in_flight_while_another_thread_closes_and_files_open(
    files: dict[str, bytes],
) -> None:
    """Reads through Python's pread and the compiled scatter read always get their file's bytes."""
    paths = list(files)
    slot = [FileSource(paths[0])]
    stop = threading.Event()
    wrong: list[str] = []
    reads = [0, 0]  # right bytes, EBADF (the source was closed before the read began)

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            src = slot[0]
            a = rng.randrange(SIZE - 4096)
            b = a + rng.randrange(1, 4096)
            try:
                if seed % 2:
                    data = src.read(a, b)
                else:  # the compiled reader, given the number while it is held
                    out = np.zeros(b - a, dtype=np.uint8)
                    with src.held() as fd:
                        recordcodec.scatter_read(
                            fd, a, out, np.array([0], np.int64), np.array([b - a], np.int64)
                        )
                    data = out.tobytes()
            except OSError as e:
                if e.errno != errno.EBADF:
                    wrong.append(f"{type(e).__name__}: {e}")
                reads[1] += 1
                continue
            if data != files[src.name][a:b]:
                wrong.append(f"{src.name}[{a}:{b}]: another file's bytes")
            reads[0] += 1

    threads = [threading.Thread(target=reader, args=(n,), daemon=True) for n in range(4)]
    for t in threads:
        t.start()
    rng = random.Random(0)
    for i in range(ROUNDS):
        old, slot[0] = slot[0], FileSource(paths[(i + 1) % FILES])
        old.close()
        # Take the numbers freed: a descriptor closed under a read is soon another file.
        decoys = [os.open(rng.choice(paths), os.O_RDONLY) for _ in range(3)]
        for fd in decoys:
            os.close(fd)
    stop.set()
    for t in threads:
        t.join(JOIN_TIMEOUT)
    slot[0].close()
    assert wrong == []
    assert reads[0] > 0


def test_a_closed_source_hands_out_no_descriptor(files: dict[str, bytes]) -> None:
    src = FileSource(next(iter(files)))
    with src.held() as fd:
        src.close()  # deferred: the block still reads
        assert src.pread_fd is None
        assert os.pread(fd, 4, 0) == next(iter(files.values()))[:4]
    with pytest.raises(OSError, match="closed") as err:
        src.read(0, 4)
    assert err.value.errno == errno.EBADF
    with pytest.raises(OSError, match="closed"):
        src.held().__enter__()
    src.close()  # idempotent


# The catalog plays no part in the read path: each catalog with local shards, S3 once, with SQLite.
@pytest.mark.parametrize(
    ("catalog_url", "where"),
    [("sqlite", "local"), ("postgresql", "local"), ("sqlite", "s3")],
    indirect=["catalog_url"],
)
def test_a_batch_over_more_shards_than_are_kept_open(
    request: pytest.FixtureRequest, catalog_url: str, tmp_path: Path, where: str
) -> None:
    """6 shards, 2 kept open: the batch reads each file while it is open, never a stale number."""
    root, options = str(tmp_path / "shards"), None
    if where == "s3":
        s3 = request.getfixturevalue("s3")
        root, options = f"{s3['url']}/train", s3["storage_options"]
    with Catalog(catalog_url, storage_options=options, max_open_shards=2) as cat:
        make_dataset(cat, root, 6, storage_options=options)
        keys = [k for i in range(6) for k in shard_keys(i)]
        for _ in range(3):
            result = cat.get_many("train", random.Random(1).sample(keys, len(keys)))
            for key, rec in zip(result.keys, result):
                assert rec is not None and bytes(rec["jpg"].data) == sample(key)["jpg"], key
        assert len(cat._lookup()._sources) <= 2


_MANY_THREADS = """
import os, sys, threading
sys.path.insert(0, sys.argv[2])
from catalog.helpers import write_shard
from shardcat.reading import Catalog
root, threads, shards = sys.argv[1], int(sys.argv[3]), int(sys.argv[4])
url = f"sqlite:///{root}/cat.db"
with Catalog(url) as cat:
    cat.create_dataset("d", root)
    for i in range(shards):
        cat.register_shard("d", write_shard(f"{root}/s{i}.shard", [f"k{i}/a"]))
cat = Catalog(url)
errors, peak = [], []
barrier = threading.Barrier(threads)
def work():
    try:
        for i in range(shards):
            assert cat.get("d", f"k{i}/a") is not None
        peak.append(len(os.listdir("/proc/self/fd")))
        barrier.wait(240)  # every thread's files open at once
    except Exception as e:
        errors.append(repr(e))
        barrier.abort()
ts = [threading.Thread(target=work) for _ in range(threads)]
[t.start() for t in ts]
[t.join(270) for t in ts]
print(cat.max_open_shards, max(peak, default=0), len(errors), errors[:1])
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_many_threads_share_the_open_file_limit(tmp_path: Path) -> None:
    """12 threads x 120 shards under a limit of 256 open files: no EMFILE, the budget kept.

    Each thread's lookups keep their own files open; before the budget was shared,
    every thread kept up to ``max_open_shards`` (``auto``: 1/8 of the limit), so 8
    threads took the whole limit and the next open failed with EMFILE.
    """
    import resource
    import subprocess
    import sys

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = 256

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))

    tests = str(Path(__file__).resolve().parents[1])
    env = {k: v for k, v in os.environ.items() if k != "SHARDCAT_MAX_OPEN_SHARDS"}
    done = subprocess.run(
        [sys.executable, "-c", _MANY_THREADS, str(tmp_path), tests, "12", "120"],
        preexec_fn=lower,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=True,
    )
    asked, peak, failed, _first = done.stdout.split(maxsplit=3)
    assert int(failed) == 0, done.stdout
    assert int(asked) == 128, done.stdout  # auto: half the limit for all caches together
    assert int(peak) <= limit, done.stdout  # the process stayed within its limit
