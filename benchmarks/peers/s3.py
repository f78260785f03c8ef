"""S3 for the peers harness: the benchmarks' moto server (``benchmarks/moto_server.py``).

It answers ranged GETs by seek + read and counts every GET's body bytes
server side, so "bytes fetched" is measured by the server for every system
alike. By default it runs in its own process (``--moto process``): an
in-process server's Python code would share the GIL with the client being
measured, slowing Python clients (s3fs: shardcat and the floor) more than
clients that release it (Lance), as a real S3 never does.
"""

from __future__ import annotations

from benchmarks.moto_server import MotoServer
from benchmarks.peers.base import Store

_active: list[MotoServer] = []  # the server bytes_sent() reads (the last one started)


def bytes_sent() -> int:
    """Body bytes of every GET the running server answered so far (0 when none runs)."""
    return _active[-1].bytes_sent() if _active else 0


class MotoS3:
    """A moto server on a free port with bucket ``bench``; ``store()`` points systems at it.

    ``mode``: ``"process"`` (its own process) or ``"in-process"`` (threads of this one).
    """

    def __init__(self, mode: str = "process") -> None:
        self.server = MotoServer(mode)
        self.mode = mode
        self.endpoint = self.server.endpoint
        _active.append(self.server)

    def store(self) -> Store:
        return Store("s3", "s3://bench", self.server.storage_options(), endpoint=self.endpoint)

    def bytes_sent(self) -> int:
        return self.server.bytes_sent()

    def gets(self) -> int:
        return self.server.gets()

    def stop(self) -> None:
        if self.server in _active:
            _active.remove(self.server)
        self.server.stop()
