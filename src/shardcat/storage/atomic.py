"""Write-once targets: a shard becomes visible complete or not at all, and, when
asked, never over an object that exists.

Publication modes:

* ``exclusive=False`` (a plain file write): the new object replaces any old one.
* ``exclusive=True`` (what ``shardcat.write`` uses): publication refuses to
  replace an existing object and raises :class:`ObjectExistsError`, so a
  committed shard can never be written again, by a late task or another job.

  - local files: the data is synced, then hard-linked to its name (``link``
    fails if the name exists, atomically), then the folder is synced;
  - ``memory://``: created under the filesystem's lock (mode ``create``);
  - S3 through obstore (:mod:`.objput`, where :mod:`.transport` picks it): one
    PUT with ``If-None-Match: *``, so S3 (and MinIO) refuse it atomically;
  - S3 through s3fs: a concurrent multipart upload (:mod:`.multipart`) that sends
    ``If-None-Match: *`` with its last request;
  - other object stores: opened with mode ``"xb"`` where the backend has it;
    backends without exclusive writes get a check right before the upload
    completes (a narrow race the catalog's unique shard URLs back up).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import importlib
import io
import os
import sys
import uuid
from typing import Any, BinaryIO, cast

from .. import config
from .._types import StorageOptions
from ..errors import ObjectExistsError, ShardcatError
from . import multipart, objput
from .fs import BUCKET_PROTOCOLS, is_local, local_path, protocol_of, redact, resolve
from .translate import is_backend_error, storage_errors, translate

__all__ = ["PendingFile", "open_pending"]

# link() is not supported everywhere (some FUSE, SMB and FAT mounts): fall back to a checked rename.
_NO_LINK = {errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS}


class PendingFile:
    """A file being written; :meth:`commit` publishes it, :meth:`discard` drops it.

    It is the :class:`~shardcat.format.sink.ShardSink` a shard writer writes
    a URL through (:func:`shardcat.storage.open_writer`): ``write`` and
    ``flush`` raise shardcat's typed storage errors, ``close`` commits,
    ``abort`` discards.

    Local files are written under a temporary name in the same folder, synced,
    and then linked or renamed into place. Object stores publish an object only
    when its upload completes, so they are written in place and a failed
    upload is aborted.

    Parameters
    ----------
    url:
        The final name.
    storage_options:
        fsspec options for ``url``.
    exclusive:
        Refuse to replace an object that exists at publication
        (:class:`ObjectExistsError`).
    """

    keeps_partial = False
    """An aborted file is dropped: nothing of it stays to salvage."""
    publishes_in_background = False
    """Whether :meth:`commit` is mostly a wait without the GIL (a local file's ``fsync``
    and link, an S3 PUT through obstore), worth running on a thread while the caller goes
    on (``RollingShardWriter`` encodes the next shard)."""

    def __init__(
        self,
        url: str,
        storage_options: StorageOptions | None = None,
        *,
        block_size: int | None = None,
        exclusive: bool = False,
    ) -> None:
        self.url = url
        self.name = redact(url)
        self.exclusive = exclusive
        self._done = False
        if is_local(url):
            self._final = local_path(url)
            folder = os.path.dirname(os.path.abspath(self._final))
            os.makedirs(folder, exist_ok=True)
            self._temp: str | None = os.path.join(
                folder, f".{os.path.basename(self._final)}.{uuid.uuid4().hex[:12]}.partial"
            )
            local = _WritebackFile(io.FileIO(self._temp, "wb"), buffer_size=1 << 20)
            local.behind = _write_behind()
            self.file: BinaryIO = local
            self._fs: Any = None
            # Publishing waits for the disk (fsync), without the GIL.
            self.publishes_in_background = True
            return
        self._temp = None
        self._buffered = False
        upload = objput.open_upload(url, storage_options, exclusive=exclusive)
        if upload is not None:
            # S3 through obstore: gathered in memory, published by one call without the GIL.
            self._fs, self._path = None, url
            self._checked_by_store = exclusive
            self.file = cast(BinaryIO, _Uploading(upload, url))
            self.publishes_in_background = True
            return
        self._fs, self._path = resolve(url, storage_options)
        if protocol_of(url) not in BUCKET_PROTOCOLS:
            # Object stores have no folders, and their makedirs creates a missing
            # bucket (s3fs, gcsfs) or container (adlfs): a typo in a URL must fail
            # (BucketNotFoundError), not make a new bucket.
            with contextlib.suppress(Exception):
                self._fs.makedirs(self._fs._parent(self._path), exist_ok=True)
        kwargs = {"block_size": block_size} if block_size else {}
        self._buffered = getattr(self._fs, "protocol", None) in ("memory", ("memory",))
        # Whether the backend checks "xb" itself when the upload completes.
        self._checked_by_store = False
        try:
            if self._buffered:
                # memory:// publishes a file as soon as it is opened: buffer, then put.
                self.file = io.BytesIO()
            else:
                self.file = cast(BinaryIO, _Uploading(self._open_remote(kwargs), url))
        except FileExistsError as e:
            raise self._exists() from e
        except Exception as e:
            if not is_backend_error(e):
                raise
            raise translate(e, url, writing=True) from e

    @property
    def transport(self) -> str:
        """The client writing the file: ``"local"``, ``"obstore"`` or ``"fsspec"``."""
        if self._temp is not None:
            return "local"
        return str(getattr(self.file, "transport", "fsspec"))

    def _open_remote(self, kwargs: dict[str, Any]) -> BinaryIO:
        if multipart.supports(self._fs):
            # S3: parts upload concurrently, while the writer goes on encoding.
            part_bytes = max(kwargs.get("block_size") or 0, multipart.PART_BYTES)
            self._checked_by_store = self.exclusive  # If-None-Match: * at completion
            upload = multipart.MultipartUpload(
                self._fs, self._path, exclusive=self.exclusive, part_bytes=part_bytes
            )
            return cast(BinaryIO, upload)
        if self.exclusive:
            try:
                f: BinaryIO = self._fs.open(self._path, "xb", **kwargs)
                self._checked_by_store = True
                return f
            except (ValueError, NotImplementedError, TypeError):
                pass  # this backend has no exclusive mode: check before completing instead
        return self._fs.open(self._path, "wb", **kwargs)  # type: ignore[no-any-return]

    # --- the ShardSink a shard writer writes through ---------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Append ``data``; a local file's failure (a full disk) is raised as a typed error."""
        try:
            n = self.file.write(data)
        except OSError as e:
            typed = self._typed(e)
            if typed is e:
                raise
            raise typed from e
        return len(data) if n is None else int(n)

    def flush(self) -> None:
        try:
            self.file.flush()
        except OSError as e:
            typed = self._typed(e)
            if typed is e:
                raise
            raise typed from e

    def close(self) -> None:
        """:meth:`commit` (the sink's name for it)."""
        self.commit()

    def abort(self) -> None:
        """:meth:`discard` (the sink's name for it)."""
        self.discard()

    def _typed(self, e: OSError) -> Exception:
        if isinstance(e, ShardcatError):
            return e
        return translate(e, self.url, writing=True)

    def _exists(self) -> ObjectExistsError:
        return ObjectExistsError(
            f"{self.name} exists already and shardcat never replaces a published shard; "
            "write under another name (shardcat.write picks a fresh one on retry)"
        )

    def commit(self) -> None:
        """Publish the file under its final name.

        Raises
        ------
        ObjectExistsError
            ``exclusive`` and an object exists under that name (nothing is replaced).
        StorageError
            The store failed; nothing was published.
        """
        if self._done:
            return
        self._done = True
        try:
            if self._temp is not None:
                self._publish_local(self._temp)
            elif self._buffered:
                mode = "create" if self.exclusive else "overwrite"
                self._fs.pipe_file(self._path, self.file.getvalue(), mode=mode)  # type: ignore[attr-defined]
            else:
                if self.exclusive and not self._checked_by_store and self._fs.exists(self._path):
                    raise FileExistsError(self._path)
                self.file.close()
        except FileExistsError as e:
            self._cleanup()
            raise self._exists() from e
        except Exception as e:
            self._cleanup()
            if isinstance(e, ShardcatError) or not is_backend_error(e):
                raise
            # Given the filesystem, a "not found" of an upload is told to be a missing bucket
            # (gcsfs says 404 for both; S3 names its NoSuchBucket itself).
            raise translate(e, self.url, writing=True, fs=self._fs) from e

    def _publish_local(self, temp: str) -> None:
        self.file.flush()
        # Sync the data before the name: after a power loss, a published name
        # (and a committed catalog row) never points at an empty or torn file.
        os.fsync(self.file.fileno())
        self.file.close()
        if not self.exclusive:
            os.replace(temp, self._final)
        else:
            try:
                os.link(temp, self._final)  # fails if the name exists, atomically
            except OSError as e:
                if e.errno not in _NO_LINK:
                    raise
                if os.path.lexists(self._final):
                    raise FileExistsError(self._final) from e
                os.replace(temp, self._final)
            else:
                os.unlink(temp)
        _sync_folder(os.path.dirname(os.path.abspath(self._final)))

    def discard(self) -> None:
        if self._done:
            return
        self._done = True
        self._cleanup()

    def _cleanup(self) -> None:
        if self._temp is not None:
            with contextlib.suppress(OSError):
                self.file.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._temp)
            return
        discard = getattr(self.file, "discard", None)
        if callable(discard):
            with contextlib.suppress(Exception):
                discard()  # aborts a multipart upload; the object never appears


def _load_sync_file_range() -> Any:
    """libc's ``sync_file_range`` (Linux), or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _load_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2
_WRITEBACK_BYTES = 8 << 20
"""A local file being written starts the disk write of every this many bytes."""
_BACKGROUND_BYTES = 1 << 20
"""Writes of at least this many bytes (the shard writer's 4 MiB blocks) go to a thread."""

try:
    _cwrite: Any = importlib.import_module(f"{__package__}._cwrite")
except ImportError:  # not built (no C compiler, or no POSIX threads): blocks written inline
    _cwrite = None

WRITE_BEHIND_ENV = config.env_var("write_behind")


def _write_behind() -> bool:
    """Whether a new local shard file writes its blocks on the C thread.

    Yes where the helper is built, unless the ``write_behind`` setting is off
    (``SHARDCAT_WRITE_BEHIND=0``): the
    thread pays where a core is idle while the writer encodes; on a machine
    with no idle core (more busy processes than cores) its hand-overs can
    cost more than they save. Read for every file, so it can change at run time.
    """
    if _cwrite is None:
        return False
    return config.enabled("write_behind")


class _WritebackFile(io.BufferedWriter):
    """A local file whose large blocks are written by a thread without the GIL, and started to disk.

    The shard writer hands its records over in 4 MiB ``bytes`` blocks. Where
    the compiled helper is built (:mod:`._cwrite`, POSIX threads), each block
    is written by a C thread that never takes the GIL, while the writer
    encodes the next block: on two cores the copy into the page cache (and
    any wait of the kernel's dirty-page throttling) costs the writer nothing.
    A Python thread would not do: it must take the GIL back after every
    ``write``, and on a busy machine each hand-over waits for the scheduler
    (measured slower than no thread). At most one block is in flight (memory
    stays bounded); every other call waits for it first, so bytes reach the
    file in order, and a failed background write is raised by the next call
    (``write``, ``flush`` or ``close``) as the same ``OSError``. Only
    immutable ``bytes`` go to the thread: a caller's ``bytearray`` could
    change after ``write`` returned.

    Publication syncs the file (``fsync``); without the rest, that one call
    would wait for the whole shard to reach the disk. ``sync_file_range(WRITE)``
    starts the write-out of each 8 MiB as it is written, without waiting and
    without dropping it from the page cache, so the disk works while the
    writer encodes and the final ``fsync`` has little left to do. (The
    ``fsync`` stays: only it makes the data durable.) Elsewhere than Linux
    the write-out is left to the final ``fsync``.
    """

    _started = 0
    _written = 0
    _pending: Any = None
    behind = False
    """Whether blocks go to the C thread (:func:`_write_behind`)."""

    def write(self, data: Any) -> int:
        if self._pending is not None:
            self._wait()
        if not self.behind or type(data) is not bytes or len(data) < _BACKGROUND_BYTES:
            return self._write_now(data)
        super().flush()  # what is buffered goes first: bytes reach the file in order
        n = len(data)
        self._written += n
        start = length = 0
        if self._written - self._started >= _WRITEBACK_BYTES and _sync_file_range is not None:
            start, length = self._started, self._written - self._started
            self._started = self._written
        self._pending = _cwrite.start(self.raw.fileno(), data, start, length)  # type: ignore[attr-defined]
        return n

    def _wait(self) -> None:
        """Wait for the block in flight; raise its error, if it failed."""
        pending, self._pending = self._pending, None
        if pending is not None:
            _cwrite.finish(pending)

    def flush(self) -> None:
        self._wait()
        super().flush()

    # The file's position counts the block in flight only once it is written.
    def tell(self) -> int:
        self._wait()
        return super().tell()

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self._wait()
        return super().seek(offset, whence)

    def truncate(self, size: int | None = None) -> int:
        self._wait()
        return super().truncate(size)

    def close(self) -> None:
        try:
            self._wait()
        finally:
            super().close()

    def _write_now(self, data: Any) -> int:
        n = super().write(data)
        self._written += n
        if self._written - self._started >= _WRITEBACK_BYTES and _sync_file_range is not None:
            super().flush()
            # Advice only: a failure here leaves the work to the final fsync.
            _sync_file_range(
                self.fileno(), self._started, self._written - self._started, _SYNC_FILE_RANGE_WRITE
            )
            self._started = self._written
        return n


class _Uploading:
    """An object store's upload whose failures are shardcat's errors.

    A multipart upload sends parts from ``write`` and ``flush``: a missing
    bucket or rejected credentials surface there, inside the shard writer.
    Not an ``io.IOBase``: its ``__del__`` would close, and so complete, an
    upload that was discarded.
    """

    def __init__(self, file: Any, url: str) -> None:
        self._file = file
        self._url = url

    def write(self, data: Any) -> int:
        with storage_errors(self._url, writing=True):
            n = self._file.write(data)
        return len(data) if n is None else int(n)

    def flush(self) -> None:
        with storage_errors(self._url, writing=True):
            self._file.flush()

    def tell(self) -> int:
        return int(self._file.tell())

    @property
    def transport(self) -> str:
        """``"obstore"`` or ``"fsspec"`` (an obstore upload can move to s3fs while written)."""
        return str(getattr(self._file, "transport", "fsspec"))

    @property
    def closed(self) -> bool:
        return bool(self._file.closed)

    def close(self) -> None:
        # Completes the upload: raises what the store says (translated by commit).
        self._file.close()

    def discard(self) -> None:
        discard = getattr(self._file, "discard", None)
        if callable(discard):
            discard()


def _sync_folder(folder: str) -> None:
    """Make a rename or link in ``folder`` durable (no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a folder; the data itself is synced
    finally:
        os.close(fd)


def open_pending(
    url: str, storage_options: StorageOptions | None = None, *, exclusive: bool = False
) -> PendingFile:
    return PendingFile(url, storage_options, exclusive=exclusive)
