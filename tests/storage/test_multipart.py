"""Concurrent multipart uploads to S3 (moto): the bytes, the parts, exclusivity and abort."""

from __future__ import annotations

import os
from typing import Any

import boto3
import fsspec
import pytest

import shardcat
from shardcat.storage.atomic import open_pending
from shardcat.storage.multipart import MultipartUpload, supports
from shardcat.storage.objput import MemoryUpload

MIB = 1 << 20


def _fs(s3: dict[str, Any]) -> Any:
    fs, _ = fsspec.core.url_to_fs(s3["url"], **s3["storage_options"])
    return fs


def _client(s3: dict[str, Any]) -> Any:
    return boto3.client("s3", endpoint_url=s3["endpoint"], region_name="us-east-1")


def test_parts_go_up_concurrently_and_join_into_the_written_bytes(s3):
    fs = _fs(s3)
    assert supports(fs)
    path = f"{s3['bucket']}/big.bin"
    data = os.urandom(23 * MIB)
    upload = MultipartUpload(fs, path, part_bytes=5 * MIB, concurrency=3)
    for i in range(0, len(data), 300_000):  # writes of any size, as a shard writer makes them
        upload.write(memoryview(data)[i : i + 300_000])
    assert upload.tell() == len(data)
    upload.close()
    assert fs.cat_file(path) == data
    # A multipart object's ETag ends with its part count: four full parts and the rest.
    assert _client(s3).head_object(Bucket=s3["bucket"], Key="big.bin")["ETag"].endswith('-5"')


def test_a_small_object_is_one_put(s3):
    fs = _fs(s3)
    path = f"{s3['bucket']}/small.bin"
    upload = MultipartUpload(fs, path, part_bytes=5 * MIB)
    upload.write(b"abc")
    upload.write(bytearray(b"def"))
    upload.write(bytes(9 * MIB))  # under two parts: still one request
    upload.close()
    assert fs.cat_file(path) == b"abcdef" + bytes(9 * MIB)
    assert "-" not in _client(s3).head_object(Bucket=s3["bucket"], Key="small.bin")["ETag"]


@pytest.mark.parametrize("size", [3, 12 * MIB], ids=["put", "multipart"])
def test_an_exclusive_upload_never_replaces_an_object(s3, size):
    fs = _fs(s3)
    path = f"{s3['bucket']}/taken.bin"
    fs.pipe_file(path, b"original")
    upload = MultipartUpload(fs, path, exclusive=True, part_bytes=5 * MIB)
    upload.write(os.urandom(size))
    with pytest.raises(FileExistsError):
        upload.close()
    upload.discard()
    assert fs.cat_file(path) == b"original"
    assert _client(s3).list_multipart_uploads(Bucket=s3["bucket"]).get("Uploads", []) == []


def test_a_discarded_upload_leaves_no_object_and_no_parts(s3):
    fs = _fs(s3)
    path = f"{s3['bucket']}/dropped.bin"
    upload = MultipartUpload(fs, path, part_bytes=5 * MIB, concurrency=2)
    upload.write(os.urandom(16 * MIB))
    upload.discard()
    assert not fs.exists(path)
    assert _client(s3).list_multipart_uploads(Bucket=s3["bucket"]).get("Uploads", []) == []
    with pytest.raises(ValueError, match="closed"):
        upload.write(b"more")


def test_a_missing_bucket_fails_the_write(s3):
    fs = _fs(s3)
    upload = MultipartUpload(fs, "no-such-bucket-wf/x.bin", part_bytes=5 * MIB, concurrency=1)
    upload.write(os.urandom(10 * MIB - 1))  # not two full parts yet: nothing sent
    with pytest.raises(FileNotFoundError):  # the missing bucket surfaces on a write, not later
        upload.write(b"x")
    upload.discard()


@pytest.mark.parametrize("transport", ["fsspec", "auto"])
def test_shards_written_to_s3_go_through_concurrent_uploads(s3, monkeypatch, transport):
    """s3fs: this module's concurrent multipart upload; auto (obstore): one PUT from memory."""
    shardcat.config.set(s3_transport=transport)
    url, opts = f"{s3['url']}/ds/train-000000.shard", s3["storage_options"]
    pending = open_pending(url, opts, exclusive=True)
    upload = pending.file._file  # type: ignore[attr-defined]
    assert isinstance(upload, MultipartUpload if transport == "fsspec" else MemoryUpload)
    pending.discard()
    payload = os.urandom(6000)
    with shardcat.ShardWriter(url, storage_options=opts, exclusive=True) as w:
        for i in range(3000):  # about 18 MiB: three parts
            w.add(f"k{i:05d}", {"bin": payload[i % 100 :]})
    r = shardcat.ShardReader(url, storage_options=opts)
    assert len(r) == 3000
    assert bytes(r.get("k02999")["bin"].data) == payload[99:]
    assert r.verify().records == 3000
