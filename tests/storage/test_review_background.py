"""Review findings: ShardWriter.close after close_in_background, and memory of an exclusive PUT."""

from __future__ import annotations

import pytest

from shardcat.errors import ObjectExistsError
from shardcat.storage.shards import ShardWriter
from shardcat.storage.transport import TRANSPORT_ENV


@pytest.fixture(autouse=True)
def _auto_transport(monkeypatch):
    monkeypatch.delenv(TRANSPORT_ENV, raising=False)


def test_close_after_close_in_background_raises_the_failed_publication(s3):
    import boto3

    url = f"{s3['url']}/taken.shard"
    boto3.client("s3", endpoint_url=s3["endpoint"], region_name="us-east-1").put_object(
        Bucket=s3["bucket"], Key="taken.shard", Body=b"theirs"
    )
    w = ShardWriter(url, storage_options=s3["storage_options"], exclusive=True)
    w.add("k", {"x": b"1"})
    future = w.close_in_background()
    # close() must not report a shard as written whose publication failed (or is in flight).
    with pytest.raises(ObjectExistsError):
        w.close()
    with pytest.raises(ObjectExistsError):
        future.result()
