"""Write-once targets: a shard becomes visible complete or not at all."""

from __future__ import annotations

import contextlib
import io
import os
import uuid
from typing import Any, BinaryIO

from .._types import StorageOptions
from ..errors import StorageError
from .fs import is_local, redact, resolve

__all__ = ["PendingFile", "open_pending"]


class PendingFile:
    """A file being written; :meth:`commit` publishes it, :meth:`discard` drops it.

    Local files are written under a temporary name in the same folder and
    renamed into place (atomic on POSIX). Object stores publish an object only
    when its upload completes, so they are written in place and a failed
    upload is aborted.
    """

    def __init__(
        self,
        url: str,
        storage_options: StorageOptions | None = None,
        *,
        block_size: int | None = None,
    ) -> None:
        self.url = url
        self.name = redact(url)
        self._done = False
        if is_local(url):
            self._final = url.split("://", 1)[1] if "://" in url else url
            folder = os.path.dirname(os.path.abspath(self._final))
            os.makedirs(folder, exist_ok=True)
            self._temp: str | None = os.path.join(
                folder, f".{os.path.basename(self._final)}.{uuid.uuid4().hex[:12]}.partial"
            )
            self.file: BinaryIO = open(self._temp, "wb", buffering=1 << 20)  # noqa: SIM115 - closed in commit/discard
            self._fs: Any = None
        else:
            self._temp = None
            self._fs, self._path = resolve(url, storage_options)
            parent = self._fs._parent(self._path)
            with contextlib.suppress(Exception):  # object stores have no real folders
                self._fs.makedirs(parent, exist_ok=True)
            kwargs = {"block_size": block_size} if block_size else {}
            self._buffered = getattr(self._fs, "protocol", None) in ("memory", ("memory",))
            try:
                # memory:// publishes a file as soon as it is opened: buffer, then put.
                self.file = (
                    io.BytesIO() if self._buffered else self._fs.open(self._path, "wb", **kwargs)
                )
            except OSError as e:
                raise StorageError(f"cannot write {self.name}: {e}") from e

    def commit(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            if self._temp is not None:
                self.file.close()
                os.replace(self._temp, self._final)
            elif self._buffered:
                self._fs.pipe_file(self._path, self.file.getvalue())  # type: ignore[attr-defined]
            else:
                self.file.close()
        except OSError as e:
            self._cleanup()
            raise StorageError(f"cannot publish {self.name}: {e}") from e

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


def open_pending(url: str, storage_options: StorageOptions | None = None) -> PendingFile:
    return PendingFile(url, storage_options)
