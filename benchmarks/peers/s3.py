"""S3 for the peers harness: the benchmarks' moto server (``benchmarks/moto_server.py``).

It answers ranged GETs by seek + read and counts every GET's body bytes
server side, so "bytes fetched" is measured by the server for every system
alike. By default it runs in its own process (``--moto process``): an
in-process server's Python code would share the GIL with the client being
measured, slowing Python clients (s3fs: shardcat and the floor) more than
clients that release it (Lance), as a real S3 never does.

With a ``profile`` other than None, every client reaches the server through
``benchmarks/latency_proxy.py`` (first-byte latency and a bandwidth cap per
connection: ``same-region``, ``cross-region``, or ``loopback`` for the proxy
alone); the server still counts the bytes it sent. The proxy runs in a process
of its own too (``proxy_mode="process"``, ``--proxy process``, the default),
for the same reason: on a thread its pacing would share the client's GIL.
"""

from __future__ import annotations

from typing import Any

from benchmarks.latency_proxy import LatencyProxy, ProxyProcess, start_proxy
from benchmarks.moto_server import MotoServer
from benchmarks.peers.base import Store

_active: list[MotoServer] = []  # the server bytes_sent() reads (the last one started)


DIRECT = "direct"
"""``--profiles`` name of S3 reached with no proxy in between (the results' backend ``s3``)."""


def backend_name(profile: str | None) -> str:
    """The backend S3 rows are reported under: ``s3`` (direct) or ``s3 PROFILE``."""
    return "s3" if profile in (None, DIRECT) else f"s3 {profile}"


def bytes_sent() -> int:
    """Body bytes of every GET the running server answered so far (0 when none runs)."""
    return _active[-1].bytes_sent() if _active else 0


class MotoS3:
    """A moto server on a free port with bucket ``bench``; ``store()`` points systems at it.

    ``mode``: ``"process"`` (its own process) or ``"in-process"`` (threads of this one).
    ``profile``: a latency profile's name (``benchmarks.latency_proxy.PROFILES``): clients
    then go through the latency proxy; None (the default) or ``"direct"`` reaches moto directly.
    ``proxy_mode``: where the proxy runs (``latency_proxy.PROXY_MODES``).
    """

    def __init__(
        self, mode: str = "process", profile: str | None = None, proxy_mode: str = "process"
    ) -> None:
        self.server = MotoServer(mode)
        self.mode = mode
        self.proxy: LatencyProxy | ProxyProcess | None = None
        if profile is not None and profile != DIRECT:
            try:
                self.proxy = start_proxy(self.server.endpoint, profile, proxy_mode)
            except BaseException:
                self.server.stop()
                raise
        self.endpoint = self.server.endpoint if self.proxy is None else self.proxy.endpoint
        _active.append(self.server)

    def storage_options(self) -> dict[str, Any]:
        opts = self.server.storage_options()
        opts["client_kwargs"] = dict(opts["client_kwargs"], endpoint_url=self.endpoint)
        return opts

    def store(self) -> Store:
        return Store(
            "s3",
            "s3://bench",
            self.storage_options(),
            endpoint=self.endpoint,
            backend=backend_name(None if self.proxy is None else self.proxy.profile.name),
        )

    def bytes_sent(self) -> int:
        return self.server.bytes_sent()

    def gets(self) -> int:
        return self.server.gets()

    def stop(self) -> None:
        if self.server in _active:
            _active.remove(self.server)
        if self.proxy is not None:
            self.proxy.stop()
        self.server.stop()
