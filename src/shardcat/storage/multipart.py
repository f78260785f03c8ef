"""Concurrent multipart uploads to S3: parts go up while the writer keeps encoding.

s3fs's own file object uploads one part at a time, inside ``write``, so a
shard writer waits for every part. :class:`MultipartUpload` hands each part
to a thread and returns at once; up to ``concurrency`` parts are in flight,
which bounds memory to about ``(concurrency + 2) * part_bytes``. An object
under two parts goes up as one PUT.
Requests go through s3fs's public ``call_s3`` (each waits on s3fs's event
loop, so the threads only wait): its credentials, retries, extra arguments
and error translation all apply. Each request is sent again through
transient failures until the deadline (:func:`.retry.call`): a part alone,
never the whole upload. The object carries a token of its upload
(:data:`TOKEN`), so that a publication refused on a retry ("exists", "no
such upload") is told apart: the object is ours (an earlier try was
applied, but its answer was lost), or another writer's.
"""

from __future__ import annotations

import concurrent.futures
import uuid
from typing import Any

from . import retry

__all__ = ["CONCURRENCY", "PART_BYTES", "TOKEN", "MultipartUpload", "new_token", "supports"]

PART_BYTES = 8 << 20
"""Part size: above S3's 5 MiB minimum, small enough to keep several parts in flight."""
CONCURRENCY = 4
"""Parts uploaded at once."""
_PARTS_PER_SIZE = 1000
"""Every this many parts the part size grows by ``PART_BYTES``, so that S3's
10,000-part limit allows objects of hundreds of GiB."""
_ABORT_WAIT_SECONDS = 60.0
"""How long :meth:`MultipartUpload.discard` waits for parts in flight before aborting."""
TOKEN = "shardcat-upload"
"""The user metadata (``x-amz-meta-shardcat-upload``) naming the upload that wrote an object."""


def new_token() -> str:
    """A token of one upload (:data:`TOKEN`): no other upload has it."""
    return uuid.uuid4().hex


_CARRIES_DATA = frozenset({"put_object", "upload_part"})


class _Dropped(Exception):
    """A part's retries stop: the upload was discarded (not the store's failure: not retried)."""


def supports(fs: Any) -> bool:
    """Whether ``fs`` is an s3fs filesystem (whose requests this module can send)."""
    return callable(getattr(fs, "call_s3", None)) and callable(getattr(fs, "split_path", None))


class MultipartUpload:
    """A write-only file whose bytes become one S3 object when it is closed.

    Parameters
    ----------
    fs:
        An s3fs ``S3FileSystem``.
    path:
        ``bucket/key`` of the object.
    exclusive:
        Send ``If-None-Match: *`` with the request that publishes the object,
        so S3 refuses to replace an existing one (``FileExistsError``).
    """

    def __init__(
        self,
        fs: Any,
        path: str,
        *,
        exclusive: bool = False,
        part_bytes: int = PART_BYTES,
        concurrency: int = CONCURRENCY,
    ) -> None:
        if part_bytes < 5 << 20:
            raise ValueError(f"S3 parts are at least 5 MiB; part_bytes is {part_bytes}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        self._fs = fs
        self._bucket, self._key, _ = fs.split_path(path)
        self._url = f"s3://{self._bucket}/{self._key}"
        self._match = {"IfNoneMatch": "*"} if exclusive else {}
        self._token = new_token()
        self._dropped = False
        self._part_bytes = part_bytes
        self._concurrency = concurrency
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._size = 0
        self._upload_id: str | None = None
        self._parts: list[concurrent.futures.Future[Any]] = []
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.closed = False

    def write(self, data: Any) -> int:
        if self.closed:
            raise ValueError(f"{self._bucket}/{self._key}: the upload is closed")
        chunk = data if type(data) is bytes else bytes(data)  # the caller may reuse its buffer
        self._chunks.append(chunk)
        self._buffered += len(chunk)
        self._size += len(chunk)
        # The upload starts once two parts are buffered: a smaller object goes
        # up as one PUT at close, one request instead of four.
        start = self._next_part_bytes() * (2 if self._upload_id is None else 1)
        if self._buffered >= start:
            self._send_full_parts()
        return len(chunk)

    def flush(self) -> None:
        """Nothing to do: a part goes up once it is full (S3 has a minimum part size)."""

    def tell(self) -> int:
        return self._size

    def _next_part_bytes(self) -> int:
        return self._part_bytes * (1 + len(self._parts) // _PARTS_PER_SIZE)

    def _send_full_parts(self) -> None:
        blob = b"".join(self._chunks)
        start = 0
        while len(blob) - start >= self._next_part_bytes():
            end = start + self._next_part_bytes()
            self._send(blob[start:end])
            start = end
        self._chunks = [blob[start:]] if start < len(blob) else []
        self._buffered = len(blob) - start

    def _call(self, method: str, **kwargs: Any) -> Any:
        """One request, sent again through transient failures until the deadline."""

        def attempt(timeout: float | None) -> Any:
            if self._dropped and method == "upload_part":
                raise _Dropped  # discarded: a part in flight stops retrying
            # call_s3 is fsspec's sync wrapper: timeout= cancels the request when it runs out.
            # A request that carries the bytes is never cut off: on a slow link a part or a
            # whole PUT may rightly take longer than the deadline; a store that stops
            # answering mid-transfer is caught by botocore's own read timeout.
            if method in _CARRIES_DATA:
                timeout = None
            return self._fs.call_s3(
                method, Bucket=self._bucket, Key=self._key, timeout=timeout, **kwargs
            )

        return retry.call(attempt, self._url)

    def _publish(self, method: str, **kwargs: Any) -> None:
        """Send the request that makes the object appear; a refusal that says it is there
        already, or that the upload is gone, is no failure if the object is this upload's
        (a try whose answer was lost had been applied: s3fs's retries, or ours)."""
        try:
            self._call(method, **kwargs)
        except FileExistsError:
            if not self._ours():
                raise
        except FileNotFoundError:
            # NoSuchUpload: the completion was applied, or the upload aborted. A PUT is
            # refused so for a missing bucket only.
            if method == "put_object" or not self._ours():
                raise

    def _ours(self) -> bool:
        """Whether the object under the key is the one this upload wrote (its token)."""
        try:
            head = self._call("head_object")
        except FileNotFoundError:
            return False
        return bool(head.get("Metadata", {}).get(TOKEN) == self._token)

    def _send(self, body: bytes) -> None:
        if self._upload_id is None:
            # Sent twice (an answer lost), it leaves an empty upload behind: no parts, no object.
            self._upload_id = self._call("create_multipart_upload", Metadata={TOKEN: self._token})[
                "UploadId"
            ]
        self._wait(self._concurrency - 1)
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                self._concurrency, thread_name_prefix=f"shardcat-upload {self._key}"
            )
        part = self._pool.submit(
            self._call,
            "upload_part",
            UploadId=self._upload_id,
            PartNumber=len(self._parts) + 1,
            Body=body,
        )
        self._parts.append(part)

    def _wait(self, in_flight: int) -> None:
        """Wait until at most ``in_flight`` parts are still uploading; raise a part's error."""
        pending = {f for f in self._parts if not f.done()}
        while len(pending) > in_flight:  # each round retires at least one part
            _, pending = concurrent.futures.wait(
                pending, return_when=concurrent.futures.FIRST_COMPLETED
            )
        for f in self._parts:
            if f.done() and f.exception() is not None:
                raise f.exception()  # type: ignore[misc]

    def close(self) -> None:
        """Publish the object: one PUT if it is small, else the last part and the completion."""
        if self.closed:
            return
        self.closed = True
        blob = b"".join(self._chunks)
        self._chunks = []
        if self._upload_id is None:
            self._publish("put_object", Body=blob, Metadata={TOKEN: self._token}, **self._match)
            return
        if blob:
            self._send(blob)
        self._wait(0)
        self._release()
        parts = []
        for number, f in enumerate(self._parts, 1):
            out = f.result()
            part = {"PartNumber": number, "ETag": out["ETag"]}
            if "ChecksumSHA256" in out:
                part["ChecksumSHA256"] = out["ChecksumSHA256"]
            parts.append(part)
        self._publish(
            "complete_multipart_upload",
            UploadId=self._upload_id,
            MultipartUpload={"Parts": parts},
            **self._match,
        )
        self._upload_id = None  # completed: nothing left to abort

    def discard(self) -> None:
        """Drop the upload: no object appears (parts already sent are deleted)."""
        self.closed = True
        self._dropped = True
        self._chunks = []
        for f in self._parts:
            f.cancel()
        concurrent.futures.wait(self._parts, timeout=_ABORT_WAIT_SECONDS)
        self._release()
        if self._upload_id is not None:
            upload_id, self._upload_id = self._upload_id, None
            self._call("abort_multipart_upload", UploadId=upload_id)

    def _release(self) -> None:
        """Let the part threads go (parts still in flight finish on their own)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)
