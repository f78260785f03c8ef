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
