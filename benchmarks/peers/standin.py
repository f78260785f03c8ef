"""The stand-in's own limits, measured in the run: what moto and the latency proxy serve here.

The S3 rows of the report measure clients against a stand-in for S3: the
moto server of ``benchmarks/moto_server.py`` (Python, in a process of its
own) and, for a latency profile, the Python proxy of
``benchmarks/latency_proxy.py`` in front of it. Both share the machine's
cores with the client being measured. Where a goal at cloud latency is
missed, the first question is whether the stand-in could have served it at
all; this module measures that, right after the systems of a backend are
done, on the same server and proxy:

- **small ranged GETs per second**: ``SMALL`` bytes from an object of
  ``OBJECT`` bytes, ``CONCURRENCY`` requests at once (and one at a time),
  directly and through the proxy. The client is the cheapest there is (raw
  ``http.client``, unsigned: the probe object is public-read), so that the
  server, not the client, is what is measured.
- **large GETs, MB/s**: whole ``LARGE``-byte objects (the floor's streaming
  chunk), one connection at a time directly and through the proxy, and
  ``STREAMS`` at once through the proxy: what the proxy and moto push
  against the profile's cap per connection.

Each figure runs for ``seconds`` (wall); the probe objects are deleted after.
"""

from __future__ import annotations

import http.client
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

SMALL = 8 << 10
"""Bytes per small ranged GET: a record of the peers' data (2-8 KiB) and its framing."""
OBJECT = 1 << 20
"""The small GETs' object: they read ranges spread over it."""
LARGE = 8 << 20
"""Bytes per large GET: the floor's streaming chunk (``floor.CHUNK``)."""
CONCURRENCY = 16
"""Small GETs in flight at once: about what a batch keeps in flight (s3fs, obstore)."""
STREAMS = 4
"""Large GETs in flight at once through the proxy: shardcat's streaming peak in the published run."""
BUCKET = "bench"
PREFIX = "standin-probe"


@dataclass(frozen=True)
class Limits:
    """What the stand-in served in this run (rates; None where not measured)."""

    small_rps: float  # small ranged GETs/s, CONCURRENCY at once, directly to moto
    small_rps_one: float  # the same, one at a time
    large_mbps: float  # one large GET at a time, directly to moto
    concurrency: int = CONCURRENCY
    streams: int = STREAMS
    small_rps_proxy: float | None = None  # through the proxy, CONCURRENCY at once
    large_mbps_proxy: float | None = None  # through the proxy, one at a time
    large_mbps_proxy_many: float | None = None  # through the proxy, STREAMS at once (total)
    latency: float | None = None  # the profile's first-byte latency (s)
    bandwidth: float | None = None  # the profile's bytes/s per connection

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def latency_rps(self) -> float | None:
        """Small GETs/s the profile's latency alone allows at ``concurrency`` in flight."""
        return self.concurrency / self.latency if self.latency else None

    def describe(self) -> str:
        """One line for the run's notes, every figure measured in the run."""
        text = (
            f"small ranged GETs ({SMALL >> 10} KiB) moto answered directly:"
            f" {self.small_rps:,.0f}/s with {self.concurrency} at once,"
            f" {self.small_rps_one:,.0f}/s one at a time; one {LARGE >> 20} MiB GET at a time"
            f" directly: {self.large_mbps:,.0f} MB/s"
        )
        if self.small_rps_proxy is None:
            return text
        bound = self.latency_rps
        text += (
            f"; through the proxy: {self.small_rps_proxy:,.0f} small GETs/s with"
            f" {self.concurrency} at once"
            + (f" (the latency alone allows {bound:,.0f}/s)" if bound else "")
        )
        cap = f" of the profile's {self.bandwidth / 1e6:g}" if self.bandwidth else ""
        text += f", one {LARGE >> 20} MiB GET at a time {self.large_mbps_proxy:,.0f} MB/s{cap}"
        line = f" of {self.streams * self.bandwidth / 1e6:g}" if self.bandwidth else ""
        text += f", {self.streams} at once {self.large_mbps_proxy_many:,.0f} MB/s{line} in all"
        return text


def _get(endpoint: str, path: str, first: int, last: int | None) -> int:
    """One unsigned GET (a range, or the whole object when ``last`` is None); body bytes read."""
    url = urlsplit(endpoint)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=60)
    try:
        headers = {} if last is None else {"Range": f"bytes={first}-{last}"}
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        if resp.status not in (200, 206):
            raise RuntimeError(f"stand-in probe: GET {path} answered {resp.status}: {body[:200]!r}")
        return len(body)
    finally:
        conn.close()


def _rate(
    endpoint: str, path: str, size: int, span: int, at_once: int, seconds: float
) -> tuple[float, float]:
    """Requests/s and body bytes/s of ``at_once`` threads each GETting in a loop for ``seconds``.

    ``size`` bytes per GET at offsets stepping through ``span`` bytes (``size == span``:
    the whole object, no Range header).
    """
    done = [0] * at_once
    got = [0] * at_once
    errors: list[BaseException] = []
    stop = time.perf_counter() + seconds

    def work(i: int) -> None:
        at = (i * 7919 * size) % span
        try:
            while time.perf_counter() < stop:
                whole = size >= span
                first = 0 if whole else at
                got[i] += _get(endpoint, path, first, None if whole else first + size - 1)
                done[i] += 1
                at = (at + 104729) % max(1, span - size)
        except BaseException as e:  # re-raised below, in the caller's thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(at_once)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return sum(done) / dt, sum(got) / dt


def measure(
    server: Any, proxy: Any | None, fs: Any, seconds: float = 1.5, streams: int = STREAMS
) -> Limits:
    """The stand-in's limits on this machine now: ``server`` (``MotoServer``), ``proxy``
    (``LatencyProxy``/``ProxyProcess`` or None), ``fs`` an s3fs filesystem reaching the server
    (to put the public probe objects)."""
    small, large = f"{BUCKET}/{PREFIX}/small", f"{BUCKET}/{PREFIX}/large"
    fs.pipe_file(small, bytes(OBJECT), ACL="public-read")
    fs.pipe_file(large, bytes(LARGE), ACL="public-read")
    try:
        direct = server.endpoint
        rps, _ = _rate(direct, f"/{small}", SMALL, OBJECT, CONCURRENCY, seconds)
        rps_one, _ = _rate(direct, f"/{small}", SMALL, OBJECT, 1, seconds)
        _, bps = _rate(direct, f"/{large}", LARGE, LARGE, 1, seconds)
        if proxy is None:
            return Limits(rps, rps_one, bps / 1e6, streams=streams)
        via = proxy.endpoint
        p_rps, _ = _rate(via, f"/{small}", SMALL, OBJECT, CONCURRENCY, seconds)
        _, p_bps = _rate(via, f"/{large}", LARGE, LARGE, 1, seconds)
        _, p_many = _rate(via, f"/{large}", LARGE, LARGE, streams, seconds)
        prof = proxy.profile
        return Limits(
            rps,
            rps_one,
            bps / 1e6,
            streams=streams,
            small_rps_proxy=p_rps,
            large_mbps_proxy=p_bps / 1e6,
            large_mbps_proxy_many=p_many / 1e6,
            latency=prof.latency,
            bandwidth=prof.bandwidth,
        )
    finally:
        fs.rm([small, large])
