"""Eight writer processes on one catalog (PostgreSQL, and SQLite in WAL mode), watched by readers.

Two shapes: 8 processes appending disjoint keys to ONE dataset (their
commits race for the dataset's version and the losers retry), and 8
processes each writing a dataset of its own. Each writer commits several
jobs of two shards through the catalog API (begin, stage, commit), released
together by a barrier. Meanwhile reader processes poll ``count`` and
``get_many`` over every key any job will write: every state a reader sees
must be a whole number of jobs (a job's records all visible or none, the
count a multiple of a job's size), and a found record must hold its own
payload. Afterwards: exact counts, no key twice, ``verify`` clean.

Bounded: fixed numbers of jobs and polls, every wait has a timeout.
"""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

import pytest

import shardcat
from shardcat.errors import CatalogLockedError
from shardcat.reading import Catalog

WRITERS = 8
READERS = 2
JOBS_PER_WRITER = 3
SHARDS_PER_JOB = 2
PER_SHARD = 25
JOB_RECORDS = SHARDS_PER_JOB * PER_SHARD
MAX_POLLS = 400  # per reader; a reader stops earlier once every writer is done
TIMEOUT = 180.0  # seconds for any one wait
SHORT_BUSY = 0.02  # seconds: a SQLite busy timeout the writers outlast
LOCK_RETRIES = 500  # per step, with SHORT_BUSY


def _key(writer: int, job: int, shard: int, i: int) -> str:
    return f"w{writer}/j{job}/s{shard}/{i:03d}"


def _job_keys(writer: int, job: int) -> list[str]:
    return [_key(writer, job, s, i) for s in range(SHARDS_PER_JOB) for i in range(PER_SHARD)]


def _writer(
    url: str, root: str, writer: int, dataset: str, go: Any, results: Any, busy: float | None
) -> None:
    """Write and commit JOBS_PER_WRITER jobs once every process is ready; report each outcome.

    With a ``busy`` timeout (SQLite), a step refused with CatalogLockedError
    is retried (up to LOCK_RETRIES times); each commit reports the refusals.
    """
    refused = 0

    def step(call: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal refused
        for _ in range(LOCK_RETRIES):
            try:
                return call(*args, **kwargs)
            except CatalogLockedError:
                refused += 1
        return call(*args, **kwargs)

    try:
        options = {} if busy is None else {"busy_timeout": busy}
        with Catalog(url, **options) as cat:
            go.wait(TIMEOUT)
            for j in range(JOBS_PER_WRITER):
                job = step(cat.begin_job, dataset)
                for s in range(SHARDS_PER_JOB):
                    path = f"{root}/w{writer}-j{j}-s{s}.shard"
                    with shardcat.ShardWriter(path) as w:
                        for i in range(PER_SHARD):
                            k = _key(writer, j, s, i)
                            w.write({"__key__": k, "txt": k})
                    step(cat.register_shard, dataset, w.close(), job=job)
                step(cat.commit_job, job)
                results.put(("commit", writer, j, refused))
    except Exception as e:  # reported, so the test fails with the reason
        results.put(("error", writer, -1, f"{type(e).__name__}: {e}"))


def _reader(
    url: str, datasets: dict[str, list[int]], ready: Any, go: Any, done: Any, results: Any
) -> None:
    """Poll count and get_many until the writers are done; report every torn state seen.

    ``datasets`` maps each dataset to the writers that append to it.
    """
    torn: list[str] = []
    states: set[tuple[str, int]] = set()
    polls = 0
    try:
        with Catalog(url) as cat:
            keys = {
                d: [k for w in ws for j in range(JOBS_PER_WRITER) for k in _job_keys(w, j)]
                for d, ws in datasets.items()
            }

            def poll() -> None:
                for d, ws in datasets.items():
                    n = cat.count(d)
                    states.add((d, n))
                    if n % JOB_RECORDS:
                        torn.append(f"{d}: count {n} is not a whole number of jobs")
                    found = cat.get_many(d, keys[d]).found()
                    for w in ws:
                        for j in range(JOBS_PER_WRITER):
                            seen = [k for k in _job_keys(w, j) if k in found]
                            if len(seen) not in (0, JOB_RECORDS):
                                torn.append(f"{d}: job w{w}/j{j} half-visible ({len(seen)})")
                    for k, rec in found.items():
                        if rec["txt"].decode() != k:
                            torn.append(f"{d}: {k} holds {rec['txt']!r}")

            poll()  # the state before any commit
            ready.wait(TIMEOUT)
            go.wait(TIMEOUT)
            while polls < MAX_POLLS and not done.is_set():
                poll()
                polls += 1
            done.wait(TIMEOUT)
            poll()  # the state after every commit
        results.put(("reader", polls, sorted(states), torn[:20]))
    except Exception as e:
        results.put(("reader-error", polls, sorted(states), [f"{type(e).__name__}: {e}"]))


def _run(
    url: str, root: str, dataset_of: dict[int, str], busy: float | None = None
) -> tuple[list[Any], list[Any]]:
    """Run the writers (writer -> its dataset) and the readers; return their reports."""
    ctx = mp.get_context("spawn")
    datasets: dict[str, list[int]] = {}
    for w, d in dataset_of.items():
        datasets.setdefault(d, []).append(w)
    ready = ctx.Barrier(READERS + 1)  # the readers have seen the empty state
    go = ctx.Barrier(WRITERS + READERS + 1)  # everyone starts together
    done = ctx.Event()
    results = ctx.Queue()
    writers = [
        ctx.Process(target=_writer, args=(url, f"{root}/{d}", w, d, go, results, busy))
        for w, d in dataset_of.items()
    ]
    readers = [
        ctx.Process(target=_reader, args=(url, datasets, ready, go, done, results))
        for _ in range(READERS)
    ]
    for p in writers + readers:
        p.start()
    ready.wait(TIMEOUT)
    go.wait(TIMEOUT)
    commits, reports = [], []
    for _ in range(WRITERS * JOBS_PER_WRITER):
        msg = results.get(timeout=TIMEOUT)
        (reports if msg[0].startswith("reader") else commits).append(msg)
        if msg[0] == "error":
            break
    done.set()
    while len(reports) < READERS:
        msg = results.get(timeout=TIMEOUT)
        (reports if msg[0].startswith("reader") else commits).append(msg)
    for p in writers + readers:
        p.join(TIMEOUT)
        assert p.exitcode == 0, p
    return commits, reports


def _check(url: str, commits: list[Any], reports: list[Any], dataset_of: dict[int, str]) -> None:
    errors = [m for m in commits if m[0] != "commit"]
    assert errors == [], errors
    assert len(commits) == WRITERS * JOBS_PER_WRITER
    for kind, polls, states, torn in reports:
        assert kind == "reader", torn
        print(
            f"reader: {polls} polls while writing, {len(states)} distinct (dataset, count) states"
        )
        assert torn == [], torn
        # It saw each dataset empty (before the first commit) and full (after the last).
        for d in set(dataset_of.values()):
            full = JOB_RECORDS * JOBS_PER_WRITER * list(dataset_of.values()).count(d)
            assert {(d, 0), (d, full)} <= set(states), (d, states)
    with Catalog(url) as cat:
        for d in sorted(set(dataset_of.values())):
            ws = [w for w, x in dataset_of.items() if x == d]
            wanted = {k for w in ws for j in range(JOBS_PER_WRITER) for k in _job_keys(w, j)}
            assert cat.count(d) == len(wanted)
            keys = list(cat.keys(d))
            assert len(keys) == len(set(keys)) == len(wanted)
            assert set(keys) == wanted
            got = cat.get_many(d, sorted(wanted))
            assert got.ok
            assert all(r["txt"].decode() == k for k, r in got.found().items())
            assert cat.verify(d, workers=1).ok
            assert len(cat.jobs(d, "committed")) == len(ws) * JOBS_PER_WRITER
            assert cat.log(d)[0].total_records == len(wanted)


@pytest.mark.slow
def test_eight_processes_appending_to_one_dataset(catalog_url: str, tmp_path: Path) -> None:
    with Catalog(catalog_url) as cat:
        (tmp_path / "shared").mkdir()
        cat.create_dataset("shared", str(tmp_path / "shared"))
    dataset_of = dict.fromkeys(range(WRITERS), "shared")
    commits, reports = _run(catalog_url, str(tmp_path), dataset_of)
    _check(catalog_url, commits, reports, dataset_of)


@pytest.mark.slow
def test_eight_processes_writing_eight_datasets(catalog_url: str, tmp_path: Path) -> None:
    dataset_of = {w: f"d{w}" for w in range(WRITERS)}
    with Catalog(catalog_url) as cat:
        for d in dataset_of.values():
            (tmp_path / d).mkdir()
            cat.create_dataset(d, str(tmp_path / d))
    commits, reports = _run(catalog_url, str(tmp_path), dataset_of)
    _check(catalog_url, commits, reports, dataset_of)


@pytest.mark.slow
def test_eight_sqlite_writers_outlasting_a_short_busy_timeout(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Writers whose busy timeout (20 ms) runs out: a typed CatalogLockedError, and retrying lands."""
    with Catalog(sqlite_url) as cat:
        (tmp_path / "shared").mkdir()
        cat.create_dataset("shared", str(tmp_path / "shared"))
    dataset_of = dict.fromkeys(range(WRITERS), "shared")
    commits, reports = _run(sqlite_url, str(tmp_path), dataset_of, busy=SHORT_BUSY)
    _check(sqlite_url, commits, reports, dataset_of)
    refused = sum(max(m[3] for m in commits if m[1] == w) for w in range(WRITERS))
    print(f"{refused} steps refused with CatalogLockedError and retried")
