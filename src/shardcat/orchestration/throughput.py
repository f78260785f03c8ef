"""How fast a job moved its bytes: the ``mb_per_s`` of every job summary and write progress event."""

from __future__ import annotations

__all__ = ["Throughput"]


class Throughput:
    """A record of ``bytes`` moved in ``seconds`` (a base of job summaries, no fields of its own)."""

    __slots__ = ()
    bytes: int
    seconds: float

    @property
    def mb_per_s(self) -> float:
        """Throughput in MB (10**6 bytes) per second."""
        return self.bytes / 1e6 / max(self.seconds, 1e-9)

    @property
    def volume(self) -> str:
        """``"12.3 MB, 45.6 MB/s"``: how a summary's line words its bytes and throughput."""
        return f"{self.bytes / 1e6:.1f} MB, {self.mb_per_s:.1f} MB/s"
