"""Storage-library errors → shardcat's, at the storage boundary: one line that says what to do.

s3fs, adlfs, aiohttp and the cloud SDKs raise their own exception types
(often not ``OSError``) with multi-line messages. Every storage call of
shardcat passes its failures through :func:`translate`, which walks the
exception's chain (``__cause__``/``__context__``: s3fs re-raises botocore's
errors as ``OSError``, adlfs wraps Azure's in ``RuntimeError``) and picks the
first thing it recognises:

* missing credentials → :class:`StorageCredentialsError`
* HTTP 401/403, ``PermissionError`` → :class:`StoragePermissionError`
* a missing bucket or container → :class:`BucketNotFoundError`
* refused, unknown host, timed out → :class:`StorageUnreachableError`
* a missing object (``FileNotFoundError``, HTTP 404) → :class:`ShardNotFoundError`
* anything else → :class:`StorageError`, with the store's first line

Library types are recognised by module and class name, so no backend
package needs to be imported (or installed) to translate its errors.
"""

from __future__ import annotations

import contextlib
import errno
import re
import socket
from collections.abc import Iterator
from typing import Any

from ..errors import (
    BucketNotFoundError,
    ShardcatError,
    ShardNotFoundError,
    StorageCredentialsError,
    StorageError,
    StorageFullError,
    StoragePermissionError,
    StorageUnreachableError,
)
from .fs import BUCKET_PROTOCOLS, protocol_of, redact

__all__ = ["is_backend_error", "is_timeout", "is_transient", "storage_errors", "translate"]

# Packages whose exceptions are the store's (raised through fsspec).
_BACKEND_MODULES = (
    "aiobotocore",
    "aiohttp",
    "adlfs",
    "azure",
    "botocore",
    "fsspec",
    "gcsfs",
    "google",
    "obstore",
    "requests",
    "s3fs",
    "urllib3",
)
_NO_CREDENTIALS = frozenset(
    {
        "NoCredentialsError",  # botocore
        "PartialCredentialsError",
        "CredentialRetrievalError",
        "CredentialUnavailableError",  # azure.identity
        "DefaultCredentialsError",  # google.auth
    }
)
_REJECTED_CODES = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AuthenticationFailed",
        "AuthorizationFailure",
        "AuthorizationPermissionMismatch",
        "InsufficientAccountPermissions",
        "ExpiredToken",
        "403",
    }
)
_NO_BUCKET_CODES = frozenset({"NoSuchBucket", "ContainerNotFound"})
# obstore (storage/objstore.py) says what failed only in its message.
_OBSTORE_DENIED = frozenset({"PermissionDeniedError", "UnauthenticatedError"})
_OBSTORE_STATUS = re.compile(r"status code: (\d{3})")
# Where obstore asks for instance credentials when it has none (IMDS: its
# addresses, or its paths on an AWS_METADATA_ENDPOINT of the user's).
_METADATA_HOSTS = ("169.254.169.254", "[fd00:ec2::254]", "/latest/api/token", "/latest/meta-data/")
_OBSTORE_MESSAGE = re.compile(r"<Message>([^<]{1,300})</Message>")
_OBSTORE_URL = re.compile(r"Error performing \w+ (https?://[^/\s]+)")
_NO_BUCKET_TEXT = ("The specified bucket does not exist", "The specified container does not exist")
_UNREACHABLE = frozenset(
    {
        "EndpointConnectionError",  # botocore
        "ConnectTimeoutError",
        "ClientConnectorError",  # aiohttp
        "ServerDisconnectedError",
        "ServiceRequestError",  # azure.core: the request never got an answer
        "ConnectionError",  # requests
    }
)
# Failures that another try of the same request may not meet (storage/retry.py): the
# connection dropped or timed out, the answer came back cut or garbled.
_TRANSIENT_NAMES = frozenset(
    {
        "ReadTimeoutError",  # botocore
        "ConnectionClosedError",
        "ResponseStreamingError",
        "IncompleteReadError",
        "IncompleteRead",  # http.client, urllib3
        "ResponseParserError",
        "FSTimeoutError",  # fsspec: a call cut off at its timeout
        "ClientPayloadError",  # aiohttp
        "ClientOSError",
        "ServerTimeoutError",
        "ServiceResponseError",  # azure.core
        "ProtocolError",  # urllib3
        "ChunkedEncodingError",  # requests
    }
)
_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequests",
        "RequestTimeout",
        "InternalError",
        "ServiceUnavailable",
        "ServerBusy",
        "OperationTimedOut",
    }
)
# obstore (reqwest, hyper) says it in its message only.
_OBSTORE_TRANSIENT = (
    "error sending request",
    "operation timed out",
    "connection closed",
    "connection reset",
    "Connection reset",
    "error decoding response body",
    "request or response body error",  # the connection dropped while a body was read
    "unexpected end of file",
    "IncompleteMessage",
)
_CREDENTIAL_HINTS = {
    "s3": "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), "
    "or pass -S key=... -S secret=... (storage_options={'key': ..., 'secret': ...})",
    "az": "pass -S connection_string=... or -S account_name=... -S account_key=... "
    "(or set AZURE_STORAGE_CONNECTION_STRING)",
    "gs": "set GOOGLE_APPLICATION_CREDENTIALS, or pass -S token=PATH_TO_KEY.json "
    "(storage_options={'token': ...}; token=anon for a public bucket or an emulator)",
}
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
_ALIASES = {"s3a": "s3", "abfs": "az", "abfss": "az", "gcs": "gs"}


def _names(e: BaseException) -> set[str]:
    return {c.__name__ for c in type(e).__mro__}


def _chain(e: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = e
    while current is not None and id(current) not in seen and len(seen) < 16:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def is_backend_error(e: BaseException) -> bool:
    """Whether ``e`` is the store's failure (not a bug in the caller): an ``OSError``,
    any exception of a storage library, or a ``RuntimeError`` wrapping one (adlfs)."""
    if isinstance(e, (OSError, NotImplementedError)):
        return True
    return any(
        type(x).__module__.split(".", 1)[0] in _BACKEND_MODULES
        for x in _chain(e)
        if isinstance(x, Exception)
    )


def _from_obstore(e: BaseException) -> bool:
    return type(e).__module__.startswith("obstore")


def _from_gcsfs(e: BaseException) -> bool:
    return type(e).__module__.startswith("gcsfs")


def _gcsfs_forbidden(e: BaseException) -> bool:
    """gcsfs's HTTP 403: a plain ``OSError("Forbidden: <path>\\n<the store's message>")``."""
    return type(e) is OSError and str(e).startswith("Forbidden: ")


def _obstore_connect_failed(e: BaseException) -> bool:
    text = str(e)
    return _from_obstore(e) and ("tcp connect error" in text or "kind: Connect" in text)


def _status(e: BaseException) -> int | None:
    """The HTTP status of a response error (aiohttp, azure.core, botocore, obstore)."""
    if _from_obstore(e):
        m = _OBSTORE_STATUS.search(str(e))
        return int(m.group(1)) if m else None
    attrs = ("status", "status_code", "code") if _from_gcsfs(e) else ("status", "status_code")
    for attr in attrs:  # gcsfs's HttpError keeps the status as .code
        value = getattr(e, attr, None)
        if isinstance(value, int) and 100 <= value < 600:
            return value
    response = getattr(e, "response", None)
    if isinstance(response, dict):
        value = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if isinstance(value, int):
            return value
    return None


def _obstore_metadata_failed(e: BaseException) -> bool:
    """obstore found no credentials: its last resort, the instance metadata service, failed."""
    text = str(e)
    return _from_obstore(e) and any(host in text for host in _METADATA_HOSTS)


def _obstore_message(e: BaseException) -> str | None:
    """The S3 error's ``<Message>`` in obstore's text: what s3fs's exception says (same errors)."""
    m = _OBSTORE_MESSAGE.search(str(e)) if _from_obstore(e) else None
    return m.group(1).strip().rstrip(".") if m else None


def _code(e: BaseException) -> str | None:
    """The store's error code: botocore's ``Error.Code``, azure's ``error_code``."""
    response = getattr(e, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        if code:
            return str(code)
    code = getattr(e, "error_code", None)
    return str(code) if code else None


def first_line(e: BaseException) -> str:
    """The first non-empty line of ``e``'s message (cloud SDKs append request ids and XML)."""
    for line in str(e).splitlines():
        if line.strip():
            return line.strip().rstrip(".")
    return type(e).__name__


def _endpoint(chain: list[BaseException], url: str) -> str:
    """Where the failed connection went: ``http://127.0.0.1:9/``, else the URL."""
    for x in chain:  # botocore names the endpoint it was given
        kwargs = getattr(x, "kwargs", None)
        if isinstance(kwargs, dict) and isinstance(kwargs.get("endpoint_url"), str):
            m = re.match(r"[a-z]+://[^/]+", kwargs["endpoint_url"])
            if m:
                return m.group(0) + "/"
    for x in chain:  # obstore names the URL it requested
        m = _OBSTORE_URL.search(str(x)) if _from_obstore(x) else None
        if m:
            return m.group(1) + "/"
    for x in chain:  # aiohttp names the host and port it tried
        host, port = getattr(x, "host", None), getattr(x, "port", None)
        if isinstance(host, str) and isinstance(port, int):
            key = getattr(x, "_conn_key", None)
            scheme = "https" if getattr(key, "is_ssl", False) else "http"
            return f"{scheme}://{host}:{port}/"
    return url


def _reason(chain: list[BaseException]) -> str:
    for x in chain:
        if (
            isinstance(x, ConnectionRefusedError)
            or getattr(x, "errno", None) == errno.ECONNREFUSED
            or (_from_obstore(x) and "Connection refused" in str(x))
        ):
            return "connection refused"
        if isinstance(x, socket.gaierror):
            return "unknown host"
        if isinstance(x, TimeoutError) or "Timeout" in type(x).__name__:
            return "timed out"
    return "no connection"


def _bucket_of(url: str) -> str:
    rest = url.split("://", 1)[1] if "://" in url else url
    return rest.split("/", 1)[0].split("@", 1)[0]


def translate(
    e: BaseException, url: str, *, writing: bool = False, fs: Any = None
) -> ShardcatError:
    """shardcat's error for the store's failure ``e`` on ``url`` (named without credentials).

    Returns ``e`` itself if it is already shardcat's (with ``path`` filled in).
    Given the filesystem ``fs``, a missing object of a bucket store is told
    apart from a missing bucket by asking for the bucket (adlfs says only
    "no such file" for both): one more request, on the error path only.
    """
    error = _translate(e, url, writing)
    if (
        fs is not None
        and type(error) is ShardNotFoundError
        and protocol_of(url) in BUCKET_PROTOCOLS
        and not _bucket_exists(fs, url)
    ):
        return _no_bucket(url)
    return error


def _bucket_exists(fs: Any, url: str) -> bool:
    try:
        return bool(fs.exists(_bucket_of(url)))
    except Exception:  # cannot tell: keep "no such shard"
        return True


def _no_bucket(url: str) -> BucketNotFoundError:
    shown = redact(url)
    what = "container" if _ALIASES.get(protocol_of(url), protocol_of(url)) == "az" else "bucket"
    bucket = _bucket_of(url)
    return BucketNotFoundError(
        f"{what} {bucket!r} does not exist ({shown}): create it first, or check the URL "
        f"(shardcat never creates a {what})",
        path=shown,
        bucket=bucket,
    )


def is_timeout(e: BaseException) -> bool:
    """Whether the store's failure ``e`` is a request that got no answer in time."""
    return any(
        isinstance(x, TimeoutError)
        or "Timeout" in type(x).__name__
        or (_from_obstore(x) and "timed out" in str(x))
        for x in _chain(e)
    )


def is_transient(e: BaseException) -> bool:
    """Whether another try of the request that failed with ``e`` may succeed.

    Yes for an unreachable store (refused, reset, unknown host for now),
    timeouts, connections dropped mid-answer, HTTP 5xx and 429 and the
    stores' "slow down" codes. Never for what :func:`translate` calls a
    missing bucket or object, missing or refused credentials, or a full
    disk: those fail the same way every time.
    """
    error = _translate(e, "", False)
    if isinstance(
        error,
        (ShardNotFoundError, StorageCredentialsError, StoragePermissionError, StorageFullError),
    ):
        return False
    if isinstance(error, StorageUnreachableError) or is_timeout(e):
        return True
    for x in _chain(e):
        status = _status(x)
        if status is not None and (status >= 500 or status == 429):
            return True
        if _code(x) in _TRANSIENT_CODES or _names(x) & _TRANSIENT_NAMES:
            return True
        if _from_obstore(x) and any(t in str(x) for t in _OBSTORE_TRANSIENT):
            return True
    return False


def _translate(e: BaseException, url: str, writing: bool) -> ShardcatError:
    shown = redact(url)
    if isinstance(e, ShardcatError):
        if isinstance(e, (StorageError, ShardNotFoundError)) and e.path is None:
            e.path = shown
        return e
    protocol = _ALIASES.get(protocol_of(url), protocol_of(url))
    chain = list(_chain(e))
    names = [_names(x) for x in chain]
    verb = "write" if writing else "read"

    # azure-identity's credential chain fails with a ClientAuthenticationError
    # that carries no response: no identity was found, nothing was rejected.
    no_identity = any(
        "ClientAuthenticationError" in n and _status(x) is None for n, x in zip(names, chain)
    )
    if (
        no_identity
        or any(n & _NO_CREDENTIALS for n in names)
        or any(_obstore_metadata_failed(x) for x in chain)
    ):
        hint = _CREDENTIAL_HINTS.get(protocol, "pass them as storage options (-S name=value)")
        store = {"s3": "S3", "az": "Azure", "gs": "Google Cloud"}.get(protocol, protocol)
        return StorageCredentialsError(
            f"no {store} credentials found for {shown}: {hint}", path=shown
        )
    if any(getattr(x, "errno", None) in _FULL for x in chain):
        return StorageFullError(
            f"{shown}: no space left (the disk or quota is full); nothing was published: "
            "free space, or write somewhere else, and rerun",
            path=shown,
        )
    for x in chain:
        code = _code(x)
        if code in _NO_BUCKET_CODES or any(t in str(x) for t in _NO_BUCKET_TEXT):
            return _no_bucket(url)
    for x in chain:
        status, code = _status(x), _code(x)
        if (
            status in (401, 403)
            or code in _REJECTED_CODES
            or isinstance(x, PermissionError)
            or _names(x) & _OBSTORE_DENIED
            or _gcsfs_forbidden(x)
        ):
            if _gcsfs_forbidden(x):
                status = 403
            why = _obstore_message(x) or (f"HTTP {status}" if status else (code or first_line(x)))
            return StoragePermissionError(
                f"{shown}: access denied ({why}): check the credentials, and that they may "
                f"{verb} here",
                path=shown,
            )
    if any(_from_obstore(x) and "incorrectly configured region" in str(x) for x in chain):
        return StorageError(
            f"{shown}: S3 redirected the request to the bucket's region, which obstore cannot "
            "follow: set region_name to the bucket's region (or SHARDCAT_S3_TRANSPORT=auto "
            "or fsspec, where s3fs follows it)",
            path=shown,
        )
    if any(n & _UNREACHABLE for n in names) or any(
        isinstance(x, (ConnectionError, socket.gaierror)) or _obstore_connect_failed(x)
        for x in chain
    ):
        return StorageUnreachableError(
            f"cannot reach {_endpoint(chain, shown)} ({_reason(chain)}): check the endpoint "
            "and the network",
            path=shown,
        )
    for x in chain:
        if isinstance(x, FileNotFoundError) or _status(x) == 404:
            return ShardNotFoundError(
                f"{shown}: no such shard (was it deleted or moved?)", path=shown
            )
    if any(isinstance(x, IsADirectoryError) for x in chain):
        return StorageError(
            f"{shown}: is a folder, not a shard file: name one of its shards "
            "(a dataset's shards: `shardcat ls DATASET`)",
            path=shown,
        )
    if isinstance(e, NotImplementedError):
        return StorageError(
            f"{shown}: the {protocol}:// backend cannot {verb} this (read-only?)", path=shown
        )
    for x in chain:
        status = _status(x)
        if status is not None and status >= 400:
            return StorageError(
                f"{shown}: the store answered HTTP {status} ({first_line(x)}); retry later, "
                "or check the store",
                path=shown,
            )
    return StorageError(f"{shown}: {verb} failed: {first_line(e)}", path=shown)


@contextlib.contextmanager
def storage_errors(url: str, *, writing: bool = False, fs: Any = None) -> Iterator[None]:
    """Translate the store's failures inside the block (see :func:`translate`)."""
    try:
        yield
    except ShardcatError as e:
        translate(e, url, writing=writing)  # fills in the path
        raise
    except Exception as e:
        if not is_backend_error(e):
            raise
        raise translate(e, url, writing=writing, fs=fs) from e
