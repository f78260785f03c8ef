"""The derived merge gap against a store that answers like S3 in the caller's region.

The benchmarks' latency proxy (benchmarks/latency_proxy.py: 20 ms to the
first byte, 90 MB/s per connection) sits in front of the session's moto
server; shardcat reads through it with each S3 transport. The proxy counts
requests and bytes, which do not depend on time: a ``get_many`` with the
derived gap must fetch at most twice the floor's bytes (one ``cat_ranges``
of the exact records) in fewer requests. The estimates are checked only
where the proxy guarantees them: no request answers sooner than its latency,
and no response streams faster than its bandwidth.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The benchmarks are a package of the repository, not of the installed wheel.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

s3fs = pytest.importorskip("s3fs")

from benchmarks.latency_proxy import PROFILES, LatencyProxy  # noqa: E402

import shardcat  # noqa: E402
from _servers import moto_bucket  # noqa: E402
from shardcat.reading import Catalog  # noqa: E402
from shardcat.storage import gap, open_source  # noqa: E402

PROFILE = PROFILES["same-region"]
RECORDS = 1500  # per shard, 1-6 KB each
SHARDS = 2
ASKED = 300


@pytest.fixture(scope="module")
def written(s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two shards on moto, registered in a SQLite catalog; their records' bytes and places."""
    bucket, options = moto_bucket(s3_endpoint, "gap")
    rng = random.Random(7)
    catalog = f"sqlite:///{tmp_path_factory.mktemp('gap')}/catalog.db"
    records: dict[str, bytes] = {}
    places: dict[str, tuple[str, int, int]] = {}
    with Catalog(catalog, storage_options=options) as cat:
        cat.create_dataset("train", f"s3://{bucket}/train")
        for s in range(SHARDS):
            url = f"s3://{bucket}/train/train-{s:06d}.shard"
            with shardcat.ShardWriter(url, storage_options=options) as w:
                for i in range(RECORDS):
                    key = f"k/{s}/{i:05d}"
                    records[key] = rng.randbytes(rng.randint(1000, 6000))
                    w.add(key, {"bin": records[key]})
            cat.register_shard("train", w.close())
            footer = shardcat.ShardReader(url, storage_options=options).footer
            for key, r in zip(footer.keys(), footer.records):
                places[key] = (url, int(r["offset"]), int(r["offset"]) + int(r["length"]))
    return {
        "endpoint": s3_endpoint,
        "options": options,
        "catalog": catalog,
        "records": records,
        "places": places,
        "bucket": bucket,
    }


def _through(options: dict[str, Any], proxy: LatencyProxy) -> dict[str, Any]:
    return {
        **options,
        "client_kwargs": {**options["client_kwargs"], "endpoint_url": proxy.endpoint},
    }


@pytest.fixture(params=["fsspec", "obstore"])
def transport(request: pytest.FixtureRequest) -> str:
    if request.param == "obstore":
        pytest.importorskip("obstore")
    shardcat.config.set(s3_transport=request.param)
    return str(request.param)


def test_a_batch_with_the_derived_gap_fetches_at_most_twice_the_floors_bytes(written, transport):
    # What is measured is bytes, not time: the suite's 3 s retry deadline covers a whole
    # s3fs cat_ranges, which the proxy's pacing and a loaded machine can stretch past it.
    shardcat.config.set(storage_retry_deadline=120)
    keys = random.Random(3).sample(sorted(written["records"]), ASKED)
    with LatencyProxy(written["endpoint"], PROFILE) as proxy:
        options = _through(written["options"], proxy)
        # The floor: one cat_ranges of exactly the records' bytes.
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
        exact = sorted(written["places"][k] for k in keys)
        before = proxy.snapshot()
        got = fs.cat_ranges(
            [u.removeprefix("s3://") for u, _, _ in exact],
            [a for _, a, _ in exact],
            [b for _, _, b in exact],
        )
        floor = proxy.snapshot() - before
        assert sum(map(len, got)) == sum(b - a for _, a, b in exact)

        with Catalog(written["catalog"], storage_options=options) as cat:
            assert cat.remote_max_gap is None  # derived
            for k in keys[:5]:  # point reads: the store's latency, measured
                assert bytes(cat.get("train", k)["bin"].data) == written["records"][k]
            before = proxy.snapshot()
            result = cat.get_many("train", keys)
            mine = proxy.snapshot() - before
            assert [bytes(r["bin"].data) for r in result] == [written["records"][k] for k in keys]
        url = exact[0][0]
        source = open_source(url, options)
        assert source.transport == transport  # type: ignore[attr-defined]
        estimate = gap.estimate(source.store_key)  # type: ignore[attr-defined]

    assert floor.requests == ASKED
    # Fewer requests than the floor (gaps read through), never more than twice its bytes.
    assert mine.requests < floor.requests
    assert mine.bytes_down <= 2 * floor.bytes_down
    # No request through the proxy is answered sooner than its latency: nor is the
    # estimate much sooner (less the transfer of a few KB at the bandwidth assumed).
    assert estimate.samples >= 5  # the first call is not counted
    assert estimate.latency >= 0.9 * PROFILE.latency


def test_a_large_read_measures_a_bandwidth_no_faster_than_the_link(written, transport):
    big = f"s3://{written['bucket']}/big.bin"
    blob = random.Random(1).randbytes(12 << 20)
    s3fs.S3FileSystem(skip_instance_cache=True, **written["options"]).pipe_file(big, blob)
    with LatencyProxy(written["endpoint"], PROFILE) as proxy:
        source = open_source(big, _through(written["options"], proxy))
        for start in range(0, 5000, 1000):  # the latency first
            assert source.read(start, start + 1000) == blob[start : start + 1000]
        assert source.read(0, len(blob)) == blob
        estimate = gap.estimate(source.store_key)  # type: ignore[attr-defined]
    assert PROFILE.bandwidth is not None
    assert estimate.bandwidth_samples == 1
    # 12 MiB took at least (12 MiB - the proxy's burst) / 90 MB/s after the first byte.
    assert estimate.bandwidth <= 1.25 * PROFILE.bandwidth
    assert estimate.latency >= 0.9 * PROFILE.latency
