"""``shardcat.write`` (its own LocalCluster of worker processes) SIGKILLed before and during
its commit, on SQLite and PostgreSQL.

The plain client's half of the killed-client suite is test_killed_clients.py,
whose docstring says what is checked after each kill; this half uses the
same checks. (Two files so that the two pytest-xdist workers, ``--dist
loadfile``, can run the halves side by side.)

Bounded: a fixed number of kills, every client has a watchdog.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestration.killclient import kill_client, run_client
from reliability.test_killed_clients import _after_kill, _client_url, _exactly_once
from shardcat.reading import Catalog

DASK_N, DASK_PARTS = 200, 10
DASK_WINDOW = (0.0, 0.5)  # the write's commit, from its last progress event on

WRITE = textwrap.dedent(
    """
    import sys, time
    import dask.bag as db
    import shardcat
    from tests.orchestration.samples import numbered_sample

    url, catalog, dataset, hold = sys.argv[1:5]
    n, parts = int(sys.argv[5]), int(sys.argv[6])

    def progress(event):
        if event.done_partitions >= parts:  # the last event: the commit comes next
            print("COMMITTING", flush=True)
            if hold == "hold":
                time.sleep(120)  # the test SIGKILLs us here

    if __name__ == "__main__":
        bag = db.from_sequence(range(n), npartitions=parts).map(numbered_sample)
        shardcat.write(bag, url, catalog=catalog, dataset=dataset, max_records_per_shard=10,
                       progress=progress)
        print("COMMITTED", flush=True)
    """
)


def _dask(
    tmp_path: Path, url: str, dataset: str, hold: str = "", delay: float | None = None
) -> None:
    """Run the write client; with a ``delay``, SIGKILL it that long after its last progress event."""
    script = tmp_path / "write.py"
    script.write_text(WRITE)
    args = [str(tmp_path / dataset), _client_url(url, dataset), dataset, hold]
    args += [str(DASK_N), str(DASK_PARTS)]
    if delay is None:
        assert run_client(script, args)[-1] == "COMMITTED"
    else:
        kill_client(script, args, until="COMMITTING", delay=delay)


def _dask_keys() -> list[str]:
    return [f"n/{i:05d}" for i in range(DASK_N)]


@pytest.mark.slow
def test_write_client_killed_before_and_during_commit(catalog_url: str, tmp_path: Path) -> None:
    fates = []
    moments: list[tuple[str, float]] = [("hold", 0.0)] + [("", d) for d in DASK_WINDOW]
    with Catalog(catalog_url) as cat:
        for n, (hold, delay) in enumerate(moments):
            dataset = f"w{n}"
            root = tmp_path / dataset
            _dask(tmp_path, catalog_url, dataset, hold, delay)
            fate = _after_kill(cat, catalog_url, dataset, _dask_keys(), root)
            if hold:
                assert fate == "open"
            fates.append(fate)
            if fate == "open":  # the rerun: a new job, from scratch
                _dask(tmp_path, catalog_url, dataset)
            _exactly_once(cat, dataset, _dask_keys(), root)
    print(f"write client kills: {fates}")
