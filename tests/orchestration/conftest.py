from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def client():
    """A real LocalCluster with two worker processes (shared by a module's tests)."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as c,
    ):
        yield c
