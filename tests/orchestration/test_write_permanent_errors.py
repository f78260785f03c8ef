"""A write that the store refuses for good fails once, not once per Dask retry.

A missing bucket is refused before any task runs (the job lists its folder
first: ``orchestration/reach.py``), so not even one upload is tried. A
refusal the listing cannot foresee (a key that may list but not write) fails
each attempt's upload the same way: the task returns such a failure instead
of raising (``orchestration/write.py``), so Dask's ``retries=`` do not run it
again. Counted at the store: a moto server in a process of its own records
the uploads it answers (``counting_moto``); a real LocalCluster with worker
processes runs the tasks.
"""

from __future__ import annotations

import json
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


def test_a_missing_bucket_is_refused_before_any_upload(client, sqlite_url):
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
    assert uploads == []  # refused before scheduling: no shard built, none sent


def test_a_key_that_may_list_but_not_write_fails_once_typed(client, sqlite_url):
    """The listing passes; every upload is denied: one attempt, shardcat's error, no retry."""
    import dask.bag as db

    from _servers import moto_enforcing_auth
    from shardcat.errors import StoragePermissionError

    with moto_enforcing_auth(free_actions=4) as endpoint:
        s3, iam = moto_client(endpoint), moto_client(endpoint, "iam")
        s3.create_bucket(Bucket="read-only")
        iam.create_user(UserName="lister")
        key = iam.create_access_key(UserName="lister")["AccessKey"]
        iam.put_user_policy(  # from here on every request is checked
            UserName="lister",
            PolicyName="list-only",
            PolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Action": ["s3:ListBucket", "s3:GetObject"],
                            "Resource": ["arn:aws:s3:::read-only", "arn:aws:s3:::read-only/*"],
                        }
                    ],
                }
            ),
        )
        options = _options(endpoint) | {"key": key["AccessKeyId"], "secret": key["SecretAccessKey"]}
        with pytest.raises(StoragePermissionError) as err:
            shardcat.write(
                db.from_sequence(
                    [{"__key__": f"k/{i:03d}", "txt": "x"} for i in range(10)], npartitions=1
                ),
                "s3://read-only/ds",
                catalog=sqlite_url,
                dataset="ds",
                storage_options=options,
                client=client,
                progress=False,
                retries=2,
            )
    assert "check the credentials" in str(err.value)
    assert key["SecretAccessKey"] not in str(err.value)


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
