"""The client process SIGKILLed before and during its commit, on SQLite and PostgreSQL.

Two clients, each a real process: a plain one (``begin_job``,
``register_shard``, ``commit_job``), here, and ``shardcat.write`` with its own
LocalCluster of worker processes, in test_killed_write_client.py (a file of
its own, so the two pytest-xdist workers can run the two halves side by
side; they share this file's checks). Each is killed once with its job open and
every shard staged (plus, for the plain client, a shard uploaded whose
registration the kill cut off), and several times at spread moments from the
start of ``commit_job`` to past its usual end. After each kill: the job is
either committed whole or still open with nothing visible; ``gc`` with the
default ``stale_after`` (24 h) leaves an open job and its files alone, with
``stale_after=0`` aborts it and removes every file it left; the rerun
commits every record exactly once, ``verify`` is clean, and the files on
disk are exactly the committed shards.

Bounded: a fixed number of kills, every client has a watchdog.
"""

from __future__ import annotations

import datetime as dt
import os
import textwrap
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from orchestration.killclient import kill_client, run_client
from reliability.test_commit_faults import _with_app_name
from shardcat.orchestration.gc import gc
from shardcat.reading import Catalog

SHARDS, PER_SHARD = 2, 2000
# Kill moments, as fractions of a measured commit: 0 to 1.5, spread evenly. The long
# run (benchmarks/reliability.py --kills N) sets SHARDCAT_RELIABILITY_KILLS.
KILLS = max(2, int(os.environ.get("SHARDCAT_RELIABILITY_KILLS", "6")))
WINDOW = tuple(1.5 * i / (KILLS - 1) for i in range(KILLS))

PLAIN = textwrap.dedent(
    """
    import sys, time
    import shardcat
    from shardcat.reading import Catalog

    catalog, root, dataset, tag, hold = sys.argv[1:6]
    shards, per = int(sys.argv[6]), int(sys.argv[7])
    with Catalog(catalog) as cat:
        cat.create_dataset(dataset, root, exist_ok=True)
        job = cat.begin_job(dataset)
        for s in range(shards):
            with shardcat.ShardWriter(f"{root}/{tag}-{s}.shard") as w:
                for i in range(per):
                    key = f"k/{s}/{i:05d}"
                    w.write({"__key__": key, "txt": key})
            cat.register_shard(dataset, w.close(), job=job)
        if hold == "hold":
            # Uploaded, its registration cut off by the kill.
            with shardcat.ShardWriter(f"{root}/{tag}-unregistered.shard") as w:
                w.write({"__key__": "k/x", "txt": "k/x"})
            print("STAGED", flush=True)
            time.sleep(120)  # the test SIGKILLs us here
        print("COMMITTING", flush=True)
        start = time.perf_counter()
        cat.commit_job(job)
        print("COMMITTED", time.perf_counter() - start, flush=True)
    """
)


def _files(root: Path) -> set[str]:
    # Every file but the dataset's history (_versions/: manifests of committed versions).
    return {str(p) for p in root.rglob("*") if p.is_file() and "_versions" not in p.parts}


def _client_url(url: str, dataset: str) -> str:
    """PostgreSQL: the client's connections carry a name, so the test can see them end."""
    return _with_app_name(url, f"killed-{dataset}") if url.startswith("postgresql") else url


def _settled(url: str, dataset: str) -> None:
    """Wait until the server has ended the dead client's connections (bounded: 30 s).

    A COMMIT the client sent just before it died may still be running on the
    server: until its connection is gone the job's fate is not decided.
    (SQLite has no server: the dead process's lock is gone with it.)
    """
    if not url.startswith("postgresql"):
        return
    engine = sa.create_engine(url)
    query = sa.text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :app")
    try:
        with engine.connect() as conn:
            for _ in range(600):
                if conn.execute(query, {"app": f"killed-{dataset}"}).scalar() == 0:
                    return
                conn.commit()
                time.sleep(0.05)
    finally:
        engine.dispose()
    raise AssertionError(f"the server kept the dead client's connections ({dataset}) for 30 s")


def _after_kill(cat: Catalog, url: str, dataset: str, keys: list[str], root: Path) -> str:
    """Check what a reader sees after the kill, then let gc clean up; return the job's fate."""
    _settled(url, dataset)
    (job,) = cat.jobs(dataset)
    visible = cat.get_many(dataset, keys).found()
    assert job.state in ("open", "committed"), job
    if job.state == "committed":  # committed whole before the kill
        assert cat.count(dataset) == len(keys) == len(visible)
    else:  # nothing half-visible
        assert cat.count(dataset) == 0 and visible == {}, len(visible)
        # gc's default stale_after (24 h) takes a young open job for a live one.
        young = gc(cat, dataset)
        assert young.aborted_jobs == [] and young.deleted_shards == [] and young.orphans == []
    staged = {s.url for s in cat.shards(dataset, state="staged")}
    report = gc(cat, dataset, grace=dt.timedelta(0), stale_after=dt.timedelta(0))
    assert report.errors == [], report.errors
    if job.state == "committed":
        # Nothing of the committed job goes; a manifest the kill cut off mid-write (its
        # .partial under _versions/) does, and gc writes the manifest (docs/LIFECYCLE.md §8).
        assert report.deleted_shards == [] and report.aborted_jobs == [], report
        assert all("/_versions/" in o for o in report.orphans), report
    else:
        assert report.aborted_jobs == [job.id]
        assert set(report.deleted_shards) == staged
        assert cat.job(job.id).state == "aborted"
        # Nothing of the dead job is left: no registered, unregistered or .partial file.
        assert _files(root) == set(), _files(root)
    return job.state


def _exactly_once(cat: Catalog, dataset: str, keys: list[str], root: Path) -> None:
    assert cat.count(dataset) == len(keys)
    listed = list(cat.keys(dataset))
    assert sorted(listed) == sorted(keys)
    got = cat.get_many(dataset, keys)
    assert got.missing == []
    assert cat.verify(dataset, workers=1).ok
    assert len(cat.jobs(dataset, "committed")) == 1
    assert _files(root) == {s.url for s in cat.shards(dataset)}


def _plain_keys() -> list[str]:
    return [f"k/{s}/{i:05d}" for s in range(SHARDS) for i in range(PER_SHARD)]


def _plain(tmp_path: Path, url: str, dataset: str, tag: str, **kill: Any) -> list[str]:
    """Run the plain client; with ``kill`` (``hold``, ``delay``) SIGKILL it, else to its end."""
    script = tmp_path / "plain.py"
    script.write_text(PLAIN)
    root = tmp_path / dataset
    root.mkdir(exist_ok=True)
    hold = "hold" if kill.get("hold") else ""
    args = [_client_url(url, dataset), str(root), dataset, tag, hold, str(SHARDS), str(PER_SHARD)]
    if not kill:
        return run_client(script, args)
    return kill_client(
        script, args, until="STAGED" if hold else "COMMITTING", delay=kill.get("delay", 0.0)
    )


def test_plain_client_killed_with_its_job_open(catalog_url: str, tmp_path: Path) -> None:
    _plain(tmp_path, catalog_url, "held", "first", hold=True)
    root = tmp_path / "held"
    assert len(_files(root)) == SHARDS + 1  # two staged, one never registered
    with Catalog(catalog_url) as cat:
        assert _after_kill(cat, catalog_url, "held", _plain_keys(), root) == "open"
        _plain(tmp_path, catalog_url, "held", "rerun")
        _exactly_once(cat, "held", _plain_keys(), root)


def test_plain_client_killed_during_commit(catalog_url: str, tmp_path: Path) -> None:
    # How long the commit takes here, now: the kill moments scale with it.
    lines = _plain(tmp_path, catalog_url, "cal", "a")
    (took,) = [float(x.split()[1]) for x in lines if x.startswith("COMMITTED")]
    fates: list[str] = []
    with Catalog(catalog_url) as cat:
        _exactly_once(cat, "cal", _plain_keys(), tmp_path / "cal")
        for n, fraction in enumerate(WINDOW):
            dataset = f"c{n}"
            _plain(tmp_path, catalog_url, dataset, "first", delay=fraction * took)
            fate = _after_kill(cat, catalog_url, dataset, _plain_keys(), tmp_path / dataset)
            fates.append(fate)
            if fate == "open":
                _plain(tmp_path, catalog_url, dataset, "rerun")
            _exactly_once(cat, dataset, _plain_keys(), tmp_path / dataset)
    print(
        f"KILLED-IN-COMMIT {catalog_url.split(':')[0]}: commit {took * 1000:.0f} ms; "
        f"{len(fates)} kills: {fates.count('committed')} after the commit landed, "
        f"{fates.count('open')} before"
    )
