"""S3 uploads through obstore: a shard gathered in memory, published by one call off the GIL.

s3fs sends a shard's parts from Python: signing, checksums and body copies
hold the GIL, so the upload and the encoding of the next records take turns
on one core (the S3 write benchmark: 0.64-0.73 of Lance's rate with s3fs). obstore
(Rust ``object_store``, as Lance uses) sends the requests without the GIL. An
upload here gathers the writer's blocks (immutable ``bytes``, kept as they
are, and handed to obstore as a list, which it sends without joining them:
measured, a 256 MiB PUT from 4 MiB blocks added 2 MiB of memory) and
publishes them when it is closed:

* ``exclusive``: one PUT with ``If-None-Match: *`` (object_store's mode
  ``create``); S3 refuses it atomically if the name is taken, as the s3fs
  path's conditional completion does. object_store cannot complete a
  multipart upload conditionally, so an exclusive publication is one
  request (S3 takes up to 5 GiB in one PUT);
* otherwise a multipart upload from memory, its parts sent concurrently.

A PUT that fails transiently is sent again, same key, same bytes, until the
deadline (:func:`.retry.call`, obstore's own retries off); a part of the
multipart upload is sent again by object_store itself, under the same
deadline (obstore has no call that sends one part; :func:`.retry.obstore_retry_config`).
The object carries its upload's token (:data:`.multipart.TOKEN`): an
exclusive PUT refused on a retry because the name is taken is a success if
the object there is ours (the earlier try had been applied, its answer
lost), and ``FileExistsError`` if it is another writer's.

Publishing blocks the caller (without the GIL): ``RollingShardWriter`` runs
it on a thread while the next shard is encoded (:mod:`.shards`). Memory is
bounded by ``SHARDCAT_S3_UPLOAD_MEMORY`` (default 512 MiB): an object that
grows past it moves, with what was gathered, to s3fs's concurrent multipart
upload (:mod:`.multipart`), so a shard of any size is written. A bucket that
S3 redirects to another region moves to s3fs too (``auto`` only), as reads do.
Which uploads take obstore is :mod:`.transport`'s rule, the same as for reads.
"""

from __future__ import annotations

import logging
from typing import Any

from .. import config
from .._types import StorageOptions
from .._units import parse_size
from ..errors import StorageError
from . import multipart, retry
from .fs import redact, resolve
from .objstore import region_redirected, s3_store

__all__ = ["MEMORY_ENV", "MemoryUpload", "memory_limit", "open_upload"]

_log = logging.getLogger(__name__)

MEMORY_ENV = config.env_var("s3_upload_memory")
"""Environment variable: bytes one upload gathers in memory before moving to s3fs ("512MiB")."""
_DEFAULT_MEMORY = 512 << 20
_MAX_PUT_BYTES = 5 << 30
"""S3's limit for one PUT."""


def memory_limit() -> int:
    """The ``s3_upload_memory`` setting (``SHARDCAT_S3_UPLOAD_MEMORY``) in bytes (512 MiB by default).

    Raises
    ------
    StorageError
        The value is not a size.
    """
    value = config.get("s3_upload_memory")
    if isinstance(value, str):
        value = value.strip()
    if value is None or value == "":
        return _DEFAULT_MEMORY
    try:
        return parse_size(value)
    except ValueError:
        raise StorageError(
            f"{MEMORY_ENV}={value!r} is not a size: give bytes or a size such as '512MiB'"
        ) from None


def open_upload(
    url: str, storage_options: StorageOptions | None = None, *, exclusive: bool = False
) -> MemoryUpload | None:
    """An obstore upload of ``url`` where :func:`.transport.choose_transport` picks obstore, else None."""
    found = s3_store(url, storage_options)
    if found is None:
        return None
    store, key, choice = found
    # A plain upload of a large object goes up in parts, retried by object_store.
    parts = None if exclusive else s3_store(url, storage_options, parts=True)
    return MemoryUpload(
        store,
        key,
        url,
        storage_options,
        exclusive=exclusive,
        region_fallback=choice.mode == "auto",
        # One PUT takes at most 5 GiB: an exclusive upload moves to s3fs's multipart before.
        limit=min(memory_limit(), _MAX_PUT_BYTES) if exclusive else memory_limit(),
        parts_store=store if parts is None else parts[0],
    )


class MemoryUpload:
    """A write-only file whose bytes become one S3 object, through obstore, when it is closed.

    ``close`` publishes (raises ``FileExistsError`` when ``exclusive`` and the
    name is taken); ``discard`` drops what was gathered, and nothing appears.
    """

    transport = "obstore"

    def __init__(
        self,
        store: Any,
        key: str,
        url: str,
        storage_options: StorageOptions | None,
        *,
        exclusive: bool,
        region_fallback: bool,
        limit: int,
        parts_store: Any = None,
    ) -> None:
        self._store = store
        self._parts_store = store if parts_store is None else parts_store
        self._token = multipart.new_token()
        self._key = key
        self._url = url
        self._options = storage_options
        self._exclusive = exclusive
        self._region_fallback = region_fallback
        self._limit = limit
        self._chunks: list[bytes] = []
        self._size = 0
        self._s3fs: multipart.MultipartUpload | None = None
        self.closed = False

    def write(self, data: Any) -> int:
        if self.closed:
            raise ValueError(f"{redact(self._url)}: the upload is closed")
        if self._s3fs is not None:
            return self._s3fs.write(data)
        chunk = data if type(data) is bytes else bytes(data)  # the caller may reuse its buffer
        self._chunks.append(chunk)
        self._size += len(chunk)
        if self._size > self._limit:
            _log.debug(
                "%s: over %s=%d bytes in memory, uploading through s3fs",
                redact(self._url),
                MEMORY_ENV,
                self._limit,
            )
            self._move_to_s3fs()
        return len(chunk)

    def flush(self) -> None:
        """Nothing to send before :meth:`close` (parts of a moved upload go up as they fill)."""

    def tell(self) -> int:
        return self._size if self._s3fs is None else self._s3fs.tell()

    def _move_to_s3fs(self) -> multipart.MultipartUpload:
        fs, path = resolve(self._url, self._options)
        upload = multipart.MultipartUpload(fs, path, exclusive=self._exclusive)
        chunks, self._chunks = self._chunks, []
        self._s3fs = upload
        self.transport = "fsspec"
        for chunk in chunks:
            upload.write(chunk)
        return upload

    def close(self) -> None:
        """Publish the object (blocks until S3 answers; the GIL is released meanwhile)."""
        if self.closed:
            return
        self.closed = True
        if self._s3fs is not None:
            self._s3fs.close()
            return
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            self._put(obstore)
        except (AlreadyExistsError, PreconditionError) as e:
            if not self._exclusive:
                raise
            raise FileExistsError(redact(self._url)) from e
        except Exception as e:
            if not (self._region_fallback and region_redirected(e, self._url)):
                raise
            self.closed = False
            self._move_to_s3fs()
            self.close()
        finally:
            self._chunks = []

    def _put(self, obstore: Any) -> None:
        chunks = self._chunks
        token = {multipart.TOKEN: self._token}
        if self._exclusive:

            def create(timeout: float | None) -> None:
                obstore.put(
                    self._store,
                    self._key,
                    chunks,
                    mode="create",
                    use_multipart=False,
                    attributes=token,
                )

            try:
                retry.call(create, self._url)
            except (obstore.exceptions.AlreadyExistsError, obstore.exceptions.PreconditionError):
                if not self._ours(obstore):
                    raise
            return
        many = self._size > 2 * multipart.PART_BYTES

        def put(timeout: float | None) -> None:
            obstore.put(
                self._parts_store if many else self._store,
                self._key,
                chunks,
                use_multipart=many,
                chunk_size=multipart.PART_BYTES,
                max_concurrency=multipart.CONCURRENCY,
                attributes=token,
            )

        retry.call(put, self._url)

    def _ours(self, obstore: Any) -> bool:
        """Whether the object under the key is the one this upload wrote (its token)."""

        def head(timeout: float | None) -> Any:
            return obstore.get(self._store, self._key, options={"head": True}).attributes

        try:
            found = retry.call(head, self._url)
        except obstore.exceptions.NotFoundError:
            return False
        return bool(found.get(multipart.TOKEN) == self._token)

    def discard(self) -> None:
        """Drop the upload: no object appears."""
        self.closed = True
        self._chunks = []
        if self._s3fs is not None:
            self._s3fs.discard()
