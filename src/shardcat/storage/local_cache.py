"""Whole remote shards copied to a local folder, bounded in size, least recently used evicted first.

Training reads every shard once per epoch: with a cache, epochs after the
first read remote shards from local disk. Several processes (DataLoader
workers, ranks on one machine) may share a folder: a copy is downloaded to
a private temporary name and renamed into place (a reader never sees half
a file), a hit refreshes the file's modification time (the LRU clock, which
``noatime`` mounts cannot break), and eviction tolerates files another
process removed first. A copy is named by the shard's URL and its file id,
so a shard replaced in the store is never served from an old copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
from dataclasses import dataclass

from .._types import StorageOptions
from .._units import parse_size
from .fs import is_local, resolve
from .translate import is_backend_error, translate

__all__ = ["LocalShardCache"]

_SUFFIX = ".shard"


@dataclass(frozen=True, slots=True)
class LocalShardCache:
    """A folder of local copies of remote shards, at most ``max_bytes`` in total.

    Picklable (a folder and a limit), so worker processes share it.

    Parameters
    ----------
    directory:
        The folder (created if missing).
    max_bytes:
        Size limit of the folder's copies: an int or ``"20GB"``. The copy
        being read is kept even if it alone exceeds the limit.
    """

    directory: str
    max_bytes: int

    @classmethod
    def create(cls, directory: str | os.PathLike[str], max_bytes: int | str) -> LocalShardCache:
        """A cache on ``directory`` (made if missing) holding at most ``max_bytes``."""
        os.makedirs(directory, exist_ok=True)
        return cls(os.path.abspath(directory), parse_size(max_bytes))

    def path_for(self, url: str, file_id: str) -> str:
        """Where the copy of this shard (this very file, by its id) lives."""
        digest = hashlib.sha256(f"{url}\0{file_id}".encode()).hexdigest()[:32]
        return os.path.join(self.directory, digest + _SUFFIX)

    def fetch(self, url: str, file_id: str, storage_options: StorageOptions | None = None) -> str:
        """A local path holding the shard: the cached copy, or a new one downloaded now.

        Local URLs are returned as they are (nothing to cache).

        Raises
        ------
        StorageError
            The download failed (nothing is left in the folder).
        """
        if is_local(url):
            return url
        path = self.path_for(url, file_id)
        try:
            os.utime(path)  # a hit: now the most recently used
        except FileNotFoundError:
            pass
        else:
            # One listing per shard opened: the limit holds even when only hits
            # follow a change of limit or another process's downloads.
            self.evict(keep=path)
            return path
        fs, remote = resolve(url, storage_options)
        partial = f"{path}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial"
        try:
            fs.get_file(remote, partial)
            os.replace(partial, path)
        except BaseException as e:
            with contextlib.suppress(FileNotFoundError):
                os.remove(partial)
            if is_backend_error(e):
                raise translate(e, url, fs=fs) from e
            raise
        self.evict(keep=path)
        return path

    def size(self) -> int:
        """Bytes of the copies in the folder now."""
        return sum(size for _, size, _ in self._entries())

    def _entries(self) -> list[tuple[float, int, str]]:
        out = []
        with os.scandir(self.directory) as it:
            for entry in it:
                if not entry.name.endswith(_SUFFIX):
                    continue
                try:
                    st = entry.stat()
                except FileNotFoundError:  # evicted by another process meanwhile
                    continue
                out.append((st.st_mtime, st.st_size, entry.path))
        return out

    def evict(self, keep: str | None = None) -> int:
        """Remove least recently used copies until the folder is within its limit; bytes freed."""
        entries = sorted(self._entries())
        total = sum(size for _, size, _ in entries)
        freed = 0
        for _, size, path in entries:
            if total <= self.max_bytes:
                break
            if path == keep:
                continue
            # A reader that opened the copy keeps reading it after removal (POSIX).
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
                freed += size
            total -= size
        return freed
