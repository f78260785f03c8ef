"""Storage failures become shardcat's typed errors, one line that says what to do.

Each against the real thing: a closed port on 127.0.0.1, a moto server
without the bucket, Azurite without the container or with a wrong key, and
an HTTP server answering 403, 404 and 500.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import Any

import pytest

import shardcat.config
from shardcat import ShardWriter
from shardcat._types import ByteRange
from shardcat.errors import (
    BucketNotFoundError,
    ShardNotFoundError,
    StorageCredentialsError,
    StorageError,
    StoragePermissionError,
    StorageUnreachableError,
)
from shardcat.storage import SourceCache, open_source
from shardcat.storage.translate import storage_errors, translate


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_head(url: str, options: dict[str, Any] | None = None) -> bytes:
    src = open_source(url, options)
    try:
        return src.read_suffix(16)  # what every reader does first
    finally:
        src.close()


def write_shard(url: str, options: dict[str, Any] | None, payload: bytes = b"x") -> None:
    with ShardWriter(url, storage_options=options, exclusive=True) as w:
        w.add("a", {"bin": payload})


def one_line(e: BaseException) -> str:
    text = str(e)
    assert "\n" not in text, text
    return text


# --- S3 (moto) ----------------------------------------------------------------------


@pytest.fixture
def no_aws_credentials(monkeypatch):
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_s3_without_credentials(s3, no_aws_credentials):
    options = {"client_kwargs": {"endpoint_url": s3["endpoint"], "region_name": "us-east-1"}}
    with pytest.raises(StorageCredentialsError) as err:
        read_head(f"{s3['url']}/x.shard", options)
    message = one_line(err.value)
    assert message.startswith("no S3 credentials found for s3://")
    assert "-S key=... -S secret=..." in message and "AWS_ACCESS_KEY_ID" in message
    assert isinstance(err.value, PermissionError)


def test_s3_endpoint_unreachable():
    port = closed_port()
    options = {
        "key": "k",
        "secret": "s",
        "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}", "region_name": "us-east-1"},
        "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 5},
    }
    # One try: how the failure is told (retries: tests/storage/test_read_retries.py).
    shardcat.config.set(storage_retry_deadline=0)
    with pytest.raises(StorageUnreachableError) as err:
        read_head("s3://bucket/x.shard", options)
    assert one_line(err.value) == (
        f"cannot reach http://127.0.0.1:{port}/ (connection refused): check the endpoint "
        "and the network"
    )
    assert isinstance(err.value, ConnectionError)


def test_s3_missing_bucket_on_read(s3):
    url = f"s3://no-such-bucket-{os.getpid()}/ds/x.shard"
    with pytest.raises(BucketNotFoundError) as err:
        read_head(url, s3["storage_options"])
    assert err.value.bucket == f"no-such-bucket-{os.getpid()}"
    assert one_line(err.value).startswith(f"bucket 'no-such-bucket-{os.getpid()}' does not exist")
    assert "create it first, or check the URL" in str(err.value)
    assert isinstance(err.value, ShardNotFoundError)  # the shard is not there either
    with SourceCache(s3["storage_options"]) as cache, pytest.raises(BucketNotFoundError):
        cache.read(url, 0, 10)


@pytest.mark.parametrize("size", [10, 6 << 20], ids=["one-request", "multipart"])
def test_s3_writing_into_a_missing_bucket_never_creates_it(s3, size):
    import boto3

    # Without a region in the options, s3fs's makedirs would create the bucket
    # (with one, moto refuses its LocationConstraint and hides the problem).
    options = {"key": "testing", "secret": "testing"}
    options["client_kwargs"] = {"endpoint_url": s3["endpoint"]}
    bucket = f"typo-{os.getpid()}-{size}"
    with pytest.raises(BucketNotFoundError) as err:
        write_shard(f"s3://{bucket}/ds/train-000000.shard", options, b"\0" * size)
    assert err.value.bucket == bucket
    assert one_line(err.value).startswith(f"bucket '{bucket}' does not exist (s3://{bucket}/")
    client = boto3.client(
        "s3",
        endpoint_url=s3["endpoint"],
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    assert bucket not in [b["Name"] for b in client.list_buckets()["Buckets"]]


@pytest.fixture(scope="module")
def s3_with_iam():
    """A moto server that enforces IAM: bucket ``deny-test`` holds ``x.shard``; user ``reader``
    has keys but no policy. Yields ``(endpoint, reader_key_id, reader_secret)``."""
    from _servers import iam_world

    with iam_world("deny-test") as world:
        yield world


def _iam_options(endpoint: str, key: str, secret: str) -> dict[str, Any]:
    return {
        "key": key,
        "secret": secret,
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        "config_kwargs": {"retries": {"max_attempts": 1}},
    }


def test_s3_access_denied_by_policy(s3_with_iam):
    """Valid keys of a user no policy allows to read: AccessDenied, not "no such shard"."""
    endpoint, key, secret = s3_with_iam
    with pytest.raises(StoragePermissionError) as err:
        read_head("s3://deny-test/x.shard", _iam_options(endpoint, key, secret))
    message = one_line(err.value)
    assert message.startswith("s3://deny-test/x.shard: access denied")
    assert "check the credentials, and that they may read here" in message
    assert secret not in message
    assert isinstance(err.value, PermissionError)
    with pytest.raises(StoragePermissionError, match="may write here"):
        write_shard("s3://deny-test/y.shard", _iam_options(endpoint, key, secret))


def test_s3_unknown_access_key(s3_with_iam):
    endpoint, _, _ = s3_with_iam
    options = _iam_options(endpoint, "AKIAUNKNOWN000000000", "not-a-secret-x1")
    with pytest.raises(StoragePermissionError) as err:
        read_head("s3://deny-test/x.shard", options)
    assert "access denied" in one_line(err.value)
    assert "not-a-secret-x1" not in str(err.value)


def test_cli_access_denied_is_one_line_with_exit_1(s3_with_iam):
    endpoint, key, secret = s3_with_iam
    p = shardcat_cli(
        "-S",
        f"client_kwargs.endpoint_url={endpoint}",
        "-S",
        f"key={key}",
        "-S",
        f"secret={secret}",
        "inspect",
        "s3://deny-test/x.shard",
    )
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    assert "access denied" in p.stderr and secret not in p.stderr + p.stdout


# --- Azure (Azurite) ------------------------------------------------------------------


def test_azure_missing_container(azure):
    options = azure["storage_options"]
    with pytest.raises(BucketNotFoundError) as err:
        write_shard("az://no-such-container/ds/x.shard", options)
    assert one_line(err.value).startswith("container 'no-such-container' does not exist")
    with pytest.raises(BucketNotFoundError):
        read_head("az://no-such-container/ds/x.shard", options)
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient.from_connection_string(azure["connection_string"])
    assert "no-such-container" not in [c.name for c in service.list_containers()]


def test_azure_wrong_key(azure):
    good = azure["connection_string"]
    bad = good.replace("AccountKey=Eby8", "AccountKey=Xby8")
    write_shard(f"{azure['url']}/x.shard", azure["storage_options"])
    with pytest.raises(StoragePermissionError) as err:
        read_head(f"{azure['url']}/x.shard", {"connection_string": bad})
    assert "access denied (HTTP 403): check the credentials" in one_line(err.value)
    assert "Xby8" not in str(err.value)


def test_azure_without_credentials_says_how_to_give_them():
    """adlfs falls back to DefaultAzureCredential, which fails when no identity is configured.

    Provoking it for real would send the credential chain to Azure's token
    endpoints and the instance metadata address (not loopback), so the test
    translates the exception azure-identity raises, built as it builds it.
    """
    from azure.core.exceptions import ClientAuthenticationError

    e = ClientAuthenticationError(
        message="DefaultAzureCredential failed to retrieve a token from the included "
        "credentials.\nAttempted credentials:\n\tEnvironmentCredential: ..."
    )
    error = translate(e, "az://container/ds/x.shard")
    assert isinstance(error, StorageCredentialsError)
    assert one_line(error).startswith("no Azure credentials found for az://container/ds/x.shard")
    assert "AZURE_STORAGE_CONNECTION_STRING" in str(error)


# --- HTTP -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error", "text"),
    [
        (403, StoragePermissionError, "access denied (HTTP 403): check the credentials"),
        (401, StoragePermissionError, "access denied (HTTP 401)"),
        (500, StorageError, "the store answered HTTP 500"),
    ],
)
def test_http_status(http_server, status, error, text):
    url = f"{http_server[0]}/status/{status}/x.shard"
    with pytest.raises(error) as err:
        read_head(url)
    assert text in one_line(err.value)
    assert err.value.path == url
    with SourceCache() as cache, pytest.raises(error):
        cache.read_batch([(url, ByteRange(0, 4))])


def test_http_missing_file(http_store):
    with pytest.raises(ShardNotFoundError) as err:
        read_head(f"{http_store[0]}/missing.shard")
    assert one_line(err.value).endswith("missing.shard: no such shard (was it deleted or moved?)")


def test_http_unreachable():
    port = closed_port()
    with pytest.raises(StorageUnreachableError) as err:
        read_head(f"http://127.0.0.1:{port}/x.shard")
    assert one_line(err.value).startswith(
        f"cannot reach http://127.0.0.1:{port}/ (connection refused)"
    )


def test_http_is_read_only(http_store):
    with pytest.raises(StorageError) as err:
        write_shard(f"{http_store[0]}/x.shard", None)
    assert "cannot write" in one_line(err.value)


def test_a_library_bug_is_not_translated():
    with pytest.raises(KeyError), storage_errors("s3://b/x"):
        raise KeyError("a bug, not the store")
    error = translate(OSError("disk on fire"), "s3://b/x")
    assert isinstance(error, StorageError) and str(error) == "s3://b/x: read failed: disk on fire"


# --- the command line: one line, no traceback ------------------------------------------------


def shardcat_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardcat", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1", **(env or {})},
        timeout=120,
    )


def test_cli_prints_storage_errors_as_one_line(http_server, s3):
    port = closed_port()
    cases = [
        (["inspect", f"http://127.0.0.1:{port}/x.shard"], f"cannot reach http://127.0.0.1:{port}/"),
        (["inspect", f"{http_server[0]}/status/403/x.shard"], "access denied (HTTP 403)"),
        (["inspect", f"{http_server[0]}/status/503/x.shard"], "HTTP 503"),
        (
            [
                "-S",
                f"client_kwargs.endpoint_url={s3['endpoint']}",
                "inspect",
                "s3://no-such-bucket-cli/x.shard",
            ],
            "bucket 'no-such-bucket-cli' does not exist",
        ),
    ]
    for args, expected in cases:
        p = shardcat_cli(*args)
        assert p.returncode == 1, (args, p.stdout, p.stderr)
        assert "Traceback" not in p.stderr, p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
        assert expected in lines[0], lines[0]


@pytest.mark.parametrize(
    ("text", "transient"),
    [
        # reqwest's words for a connection lost while an answer's body was read (seen
        # mid-stream from a loaded moto server): another try reads the range again.
        ("Generic S3 error: request or response body error", True),
        ("Generic S3 error: error decoding response body", True),
        ("Generic S3 error: error sending request", True),
        ("Generic S3 error: Error performing request: connection reset", True),
        ("Generic S3 error: the URL's bucket name is not valid", False),
    ],
)
def test_obstore_failures_are_retried_when_another_try_may_succeed(text, transient):
    import obstore.exceptions

    from shardcat.storage.translate import is_transient

    assert is_transient(obstore.exceptions.GenericError(text)) is transient
