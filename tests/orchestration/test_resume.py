"""Resume: a write job whose client was SIGKILLed at 90 % finishes by writing only the rest."""

from __future__ import annotations

import functools
import textwrap
from pathlib import Path
from typing import Any

import dask.bag as db
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardcat
from shardcat.errors import JobExistsError
from shardcat.orchestration.resume import attempts
from shardcat.reading import Catalog

from .killclient import kill_client
from .samples import numbered_sample

N, PARTS, PER_SHARD = 200, 10, 10  # two shards per partition

CLIENT = textwrap.dedent(
    """
    import functools, os, sys, time
    # the samples module under the name the tests import it by (and so do its workers)
    sys.path.insert(0, os.path.abspath("tests"))
    import dask.bag as db
    import shardcat
    from orchestration.samples import SLOW_ENV, numbered_sample

    url, catalog = sys.argv[1], sys.argv[2]

    def progress(event):
        print("done", event.done_partitions, flush=True)
        if event.done_partitions >= 9:
            print("READY", flush=True)
            time.sleep(120)  # the test SIGKILLs us here

    if __name__ == "__main__":
        # The last partition's second shard takes 30 s: it is in flight at the kill. Slow
        # through the environment its workers inherit: the bag is the one the rerun makes
        # (a resume refuses other inputs, and compares the bags' Dask tokens).
        os.environ[SLOW_ENV] = "190:3.0"
        bag = db.from_sequence(range(200), npartitions=10).map(
            functools.partial(numbered_sample, slow_from=-1)
        )
        shardcat.write(bag, url, catalog=catalog, dataset="conv", job_name="nightly",
                       max_records_per_shard=10, progress=progress)
    """
)


def _bag(slow_from: int = -1) -> db.Bag:
    return db.from_sequence(range(N), npartitions=PARTS).map(
        functools.partial(numbered_sample, slow_from=slow_from)
    )


def _kill_client_at_90_percent(tmp_path: Path, url: str, catalog: str) -> None:
    """Run a write job in a real client process with its own LocalCluster; SIGKILL it at 9/10."""
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    kill_client(script, [url, catalog], until="READY")


def _records(cat: Catalog, dataset: str) -> list[tuple[str, bytes, object]]:
    batch = cat.get_many(dataset, [f"n/{i:05d}" for i in range(N)])
    assert batch.missing == []
    return [(r.key, r["bin"].data, r["json"].decode()) for r in batch.records]


def _shard_files(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*.shard")}


def test_killed_client_resumes_writing_only_the_unfinished_partitions(
    tmp_path, catalog_url, client
):
    root = tmp_path / "conv"
    _kill_client_at_90_percent(tmp_path, str(root), catalog_url)
    cat = Catalog(catalog_url)
    (job,) = cat.jobs("conv", state="open")  # the dead client left its job open, invisible
    assert cat.count("conv") == 0
    staged = [s for s in cat.shards("conv", state="staged") if s.job_id == job.id]
    complete = attempts(staged, job.properties["partition_base"])  # type: ignore[index]
    assert len(complete) == PARTS - 1  # the slow last partition was in flight
    assert sorted(complete) == list(range(PARTS - 1))
    # ... with its first shard staged, unless the kill came before it was
    assert len(staged) in (2 * (PARTS - 1), 2 * (PARTS - 1) + 1)
    # A finished partition whose file was damaged since is not trusted: it is rewritten.
    damaged = complete[0][0][0].url
    data = bytearray(Path(damaged).read_bytes())
    data[len(data) // 2] ^= 0xFF
    Path(damaged).write_bytes(bytes(data))
    before = _shard_files(root)

    # By its name on SQLite; on PostgreSQL as "the dataset's open job into this URL".
    which: dict[str, Any] = (
        {"job_name": "nightly"} if catalog_url.startswith("sqlite") else {"resume": True}
    )
    summary = shardcat.write(
        _bag(),
        str(root),
        catalog=catalog_url,
        dataset="conv",
        max_records_per_shard=PER_SHARD,
        client=client,
        progress=False,
        **which,
    )

    written = _shard_files(root) - before
    assert summary.job_id == job.id
    assert summary.resumed_partitions == PARTS - 2
    assert len(written) == 2 * 2  # the in-flight partition and the damaged one, 2 shards each
    assert summary.records == N and summary.partitions == PARTS
    assert damaged not in summary.shards
    assert cat.job(job.id).state == "committed"
    # The result equals an uninterrupted run of the same job.
    shardcat.write(
        _bag(),
        str(tmp_path / "whole"),
        catalog=catalog_url,
        dataset="whole",
        max_records_per_shard=PER_SHARD,
        client=client,
        progress=False,
    )
    assert _records(cat, "conv") == _records(cat, "whole")
    assert cat.count("conv") == N
    assert len(cat.shards("conv")) == 2 * PARTS
    # A committed job's name is taken: rerunning it would write every record twice.
    with pytest.raises(JobExistsError, match="committed already"):
        shardcat.write(
            _bag(),
            str(root),
            catalog=catalog_url,
            dataset="conv",
            job_name="nightly",
            mode="append",
            client=client,
            progress=False,
        )


def test_resume_without_an_open_job_starts_a_new_one(tmp_path, sqlite_url, client):
    summary = shardcat.write(
        _bag(),
        str(tmp_path / "fresh"),
        catalog=sqlite_url,
        dataset="fresh",
        max_records_per_shard=PER_SHARD,
        client=client,
        progress=False,
        resume=True,
    )
    assert summary.resumed_partitions == 0 and summary.records == N
    job = Catalog(sqlite_url).job(summary.job_id)
    assert job.state == "committed" and job.properties["partition_base"] == 0  # type: ignore[index]


def _row(number: int, attempt: str, last: int | None, i: int) -> Any:
    import datetime as dt

    from shardcat.catalog import ShardRow

    meta: dict[str, Any] = {"attempt": attempt}
    if last is not None:
        meta["partition_shards"] = last
    return ShardRow(
        id=i, dataset="d", url=f"/x/{i}.shard", state="staged", job_id=1, shard_number=number,
        record_count=1, size_bytes=1, payload_bytes=1, file_id="0" * 32, format_version=(1, 0),
        created_at=dt.datetime(2026, 1, 1), header_crc=0, data_crc=0, footer_crc=0, metadata=meta,
    )  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    base=st.integers(0, 3),
    runs=st.lists(
        st.tuples(
            st.integers(0, 4),  # partition
            st.integers(1, 4),  # shards the attempt meant to write
            st.integers(0, 4),  # shards it staged before it died (>= meant: it finished)
            st.booleans(),  # one of its shards is missing from the catalog
        ),
        max_size=8,
    ),
)
def test_an_attempt_is_complete_exactly_when_it_staged_every_shard_up_to_its_marked_last(
    base, runs
):
    rows, expected = [], set()
    for n, (partition, meant, staged, hole) in enumerate(runs):
        token = f"a{n}"
        first = (base + partition) * 1000
        done = min(staged, meant)
        kept = [i for i in range(done) if not (hole and i == done // 2)]
        for i in kept:
            last = meant if i == meant - 1 else None
            rows.append(_row(first + i, token, last, len(rows)))
        if done == meant and len(kept) == meant:
            expected.add((partition, token))
    found = attempts(rows, base)
    got = {(p, tries[0].metadata["attempt"]) for p, group in found.items() for tries in [*group]}
    assert got == expected
    for p, group in found.items():
        for shards in group:
            first = (base + p) * 1000
            assert [s.shard_number for s in shards] == list(range(first, first + len(shards)))


def test_an_interrupted_named_job_stays_open_and_resumes(tmp_path, sqlite_url, client):
    def interrupt(event: Any) -> None:
        if event.done_partitions >= 5:
            raise KeyboardInterrupt  # Ctrl-C in the client, halfway

    root = str(tmp_path / "half")
    options: dict[str, Any] = {
        "catalog": sqlite_url,
        "dataset": "half",
        "max_records_per_shard": PER_SHARD,
        "client": client,
        "job_name": "half",
    }
    with pytest.raises(KeyboardInterrupt):
        shardcat.write(_bag(), root, progress=interrupt, **options)
    cat = Catalog(sqlite_url)
    (job,) = cat.jobs("half", state="open")
    summary = shardcat.write(_bag(), root, progress=False, **options)
    assert summary.job_id == job.id
    assert summary.resumed_partitions >= 5 and summary.records == N
    assert _records(cat, "half") == [
        (f"n/{i:05d}", numbered_sample(i)["bin"], {"i": i}) for i in range(N)
    ]
    # Without a name, an interrupted job is aborted as before: nothing to resume.
    with pytest.raises(KeyboardInterrupt):
        shardcat.write(
            _bag(), str(tmp_path / "anon"), catalog=sqlite_url, dataset="anon",
            max_records_per_shard=PER_SHARD, client=client, progress=interrupt,
        )  # fmt: skip
    assert [j.state for j in cat.jobs("anon")] == ["aborted"]
