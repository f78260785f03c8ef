"""A write into a missing bucket fails once, not once per Dask retry.

Each attempt of a partition task builds its shard, then uploads it; a
missing bucket fails the upload the same way every time. The task returns
such a failure instead of raising (``orchestration/write.py``), so Dask's
``retries=`` do not run it again. Counted at the store: a moto server in a
process of its own records the uploads it answers (``counting_moto``); a
real LocalCluster with worker processes runs the tasks.
"""

from __future__ import annotations

from typing import Any

import pytest

import shardcat
from _servers import counting_moto, moto_client, requests_seen
from shardcat.errors import BucketNotFoundError

pytestmark = pytest.mark.slow


def _options(endpoint: str) -> dict[str, Any]:
    return {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        "use_listings_cache": False,
    }


def test_a_missing_bucket_is_tried_once_whatever_retries_allow(client, sqlite_url):
    import dask.bag as db

    samples = [{"__key__": f"k/{i:03d}", "txt": f"sample {i}"} for i in range(40)]
    with counting_moto() as endpoint:
        moto_client(endpoint).create_bucket(Bucket="here")
        requests_seen(endpoint)  # forget the set-up
        with pytest.raises(BucketNotFoundError) as err:
            shardcat.write(
                db.from_sequence(samples, npartitions=1),
                "s3://not-here/ds",
                catalog=sqlite_url,
                dataset="ds",
                storage_options=_options(endpoint),
                client=client,
                progress=False,
                retries=2,
            )
        uploads = [
            r
            for r in requests_seen(endpoint)
            if r["method"] in ("PUT", "POST") and r["path"].startswith("/not-here/")
        ]
    assert err.value.bucket == "not-here"
    assert len(uploads) == 1, uploads  # one attempt: Dask's 2 retries were not used


def test_credentials_the_client_has_and_the_workers_lack_are_said_to_be_the_workers(
    s3, sqlite_url, monkeypatch
):
    """The user's case: AWS_* set in the client's shell, not in the workers' environment."""
    import dask.bag as db
    from distributed import Client, LocalCluster

    from shardcat.errors import StorageCredentialsError

    env = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE")
    for name in env:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance metadata to ask
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        # Only now does this process get them: the worker started without.
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        options = {k: v for k, v in s3["storage_options"].items() if k not in ("key", "secret")}
        with pytest.raises(StorageCredentialsError) as err:
            shardcat.write(
                db.from_sequence([{"__key__": "k", "txt": "x"}], npartitions=1),
                f"{s3['url']}/ds",
                catalog=sqlite_url,
                dataset="ds",
                storage_options=options,
                client=client,
                progress=False,
            )
    text = str(err.value)
    assert text.startswith("on the Dask workers: ") and "storage options" in text
    assert "testing" not in text
