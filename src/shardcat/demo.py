"""The Quickstart demo: a Dask job writes a dataset into shards with a SQL catalog, then uses it.

Generates samples (PNG images, JSON labels, small arrays), writes them with
a local Dask cluster (or a given scheduler) into numbered shards registered
in a catalog (SQLite next to the shards by default), then looks keys up one
at a time and in a batch, runs a SQL query over the catalog, streams the
dataset back as a Dask bag and verifies every shard against the catalog.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import random
import struct
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ._units import count_of, format_bytes
from .storage import is_local

if TYPE_CHECKING:
    from .orchestration import WriteProgressCallback

__all__ = ["DemoReport", "make_png", "run_demo", "samples", "time_warm"]

_LABELS = ["cat", "dog", "bird", "fish", "horse", "frog", "ship", "truck"]


def make_png(width: int, height: int, rgb: np.ndarray) -> bytes:
    """A real PNG of an RGB uint8 array, made with zlib only."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )


def samples(count: int, seed: int = 0, size: int = 32, start: int = 0) -> Iterator[dict[str, Any]]:
    """``count`` synthetic samples: a PNG image, a JSON label and a small float array.

    Indexes run from ``start``; a partition of a larger dataset passes its own
    ``start`` (and gets its own random stream).
    """
    rng = np.random.default_rng(seed if start == 0 else [seed, start])
    for i in range(start, start + count):
        label = int(rng.integers(len(_LABELS)))
        base = rng.integers(0, 256, size=3, dtype=np.uint8)
        noise = rng.integers(0, 48, size=(size, size, 3), dtype=np.uint8)
        image = (base[None, None, :] // 2 + noise).astype(np.uint8)
        yield {
            "__key__": f"{_LABELS[label]}/{i:06d}",
            "png": make_png(size, size, image),
            "json": {"label": label, "name": _LABELS[label], "index": i},
            "npy": rng.standard_normal(16).astype(np.float32),
        }


def time_warm(call: Callable[[Any], object], args: Sequence[Any]) -> float:
    """Seconds ``call`` took for ``args[1:]``, in total; ``args[0]`` warms up untimed.

    A first call opens the shard files and the database connection and
    compiles the SQL; users meet that once, then every later call is warm.
    Timing it would make a batch look slower per key than single lookups.

    Raises
    ------
    ValueError
        Fewer than two arguments (nothing would be timed).
    """
    if len(args) < 2:
        raise ValueError(f"time_warm needs a warm-up argument and one to time, got {len(args)}")
    call(args[0])
    t0 = time.perf_counter()
    for arg in args[1:]:
        call(arg)
    return time.perf_counter() - t0


def _partition(start: int, count: int, seed: int) -> list[dict[str, Any]]:
    return list(samples(count, seed, start=start))


@dataclass
class DemoReport:
    """What the demo did and how fast."""

    catalog: str = ""
    root: str = ""
    records: int = 0
    shards: int = 0
    bytes: int = 0
    write_seconds: float = 0.0
    lookups: int = 0
    lookup_seconds: float = 0.0  # all ``lookups`` together, warm
    batch: int = 0  # keys per batch
    batch_seconds: float = 0.0  # one warm batch (the mean of the timed ones)
    per_label: list[tuple[str, int]] = field(default_factory=list)
    streamed: int = 0
    stream_seconds: float = 0.0
    verified_shards: int = 0
    patterns: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        mb = self.bytes / 1e6
        return [
            f"wrote {count_of(self.records, 'sample')} into {count_of(self.shards, 'shard')} "
            f"({format_bytes(self.bytes)}) "
            f"with Dask in {self.write_seconds:.2f} s ({mb / max(self.write_seconds, 1e-9):.0f} MB/s, "
            "generating the samples on the workers, registration and commit included)",
            f"  shards: {', '.join(self.patterns[:3])}{' ...' if len(self.patterns) > 3 else ''}",
            f"  catalog: {self.catalog}",
            f"looked up {self.lookups} random keys one by one: "
            f"{1e3 * self.lookup_seconds / max(self.lookups, 1):.2f} ms per key "
            "(one SQL query + one ranged read each; after one untimed warm-up lookup)",
            f"looked up {self.batch:,} random keys in one batch in {1e3 * self.batch_seconds:.0f} ms "
            f"({self.batch / max(self.batch_seconds, 1e-9):,.0f} keys/s; the mean of 3 batches "
            "after one untimed warm-up batch)",
            "SQL over the catalog, samples per label: "
            + ", ".join(f"{name} {n}" for name, n in self.per_label),
            f"streamed {self.streamed:,} samples back as a Dask bag in {self.stream_seconds:.2f} s",
            f"verified {self.verified_shards} shards against the catalog: every CRC checked, no problems",
        ]


def _start_afresh(out: str) -> None:
    """Remove a previous run's dataset (its shards and history) and its catalog from ``out``."""
    from .orchestration.gc import delete_dataset
    from .reading import Catalog

    db = os.path.join(out, "catalog.db")
    if not os.path.exists(db):
        return
    with Catalog(f"sqlite:///{db}") as old:
        if "demo" in {d.name for d in old.datasets()}:
            delete_dataset(old, "demo")
    os.remove(db)


def run_demo(
    out: str = "shardcat-demo",
    count: int = 4000,
    shard_size: str = "2MB",
    *,
    catalog: str | None = None,
    scheduler: str | None = None,
    workers: int = 2,
    storage_options: Mapping[str, Any] | None = None,
    seed: int = 0,
    progress: bool | WriteProgressCallback | None = True,
) -> DemoReport:
    """Write ``count`` samples as the dataset ``demo`` under ``out`` and exercise it.

    Reruns replace the dataset (``mode="overwrite"``) and remove the replaced
    shards, so the demo can be run again and again; in a local folder with its
    own catalog, a rerun starts afresh (catalog and shards removed first), so
    the shard names the README shows stay those of a first run. ``progress`` is
    handed to :func:`shardcat.write`.
    """
    import sqlalchemy as sa

    from .catalog import visibility
    from .orchestration import DaskCluster, client_for, read, write
    from .orchestration.gc import gc
    from .reading import Catalog

    if is_local(out):
        out = os.path.abspath(out)
        os.makedirs(out, exist_ok=True)
        if catalog is None:
            _start_afresh(out)
    catalog = (
        catalog
        or f"sqlite:///{os.path.join(out, 'catalog.db') if is_local(out) else 'shardcat-demo.db'}"
    )
    opts = dict(storage_options or {})
    report = DemoReport(root=out)
    cluster = DaskCluster(scheduler=scheduler) if scheduler else DaskCluster(workers=workers)
    with Catalog(catalog, storage_options=opts) as cat:
        report.catalog = cat.url

        if not logging.getLogger().isEnabledFor(logging.INFO):
            logging.getLogger("distributed").setLevel(logging.WARNING)
        with client_for(cluster, out) as client:
            import dask.bag as db
            from dask.delayed import delayed

            # Each worker generates its own partition: no data travels in the graph.
            parts = max(2, 2 * workers)
            per = -(-count // parts)
            bag = db.from_delayed(
                [
                    delayed(_partition)(start, min(per, count - start), seed)
                    for start in range(0, count, per)
                ]
            )
            t0 = time.perf_counter()
            summary = write(
                bag,
                out,
                catalog=cat,
                dataset="demo",
                shard_size=shard_size,
                compression="zstd",
                mode="overwrite",
                storage_options=opts,
                client=client,
                progress=progress,
            )
            report.write_seconds = time.perf_counter() - t0
            report.records, report.shards, report.bytes = (
                summary.records,
                len(summary.shards),
                summary.bytes,
            )
            report.patterns = summary.shard_patterns
            # A rerun replaced the previous demo: forget its versions, so that verify checks
            # this one alone and gc (below) removes the replaced shards.
            cat.expire("demo", keep_last=1)

            keys = list(cat.keys("demo"))  # the latest version's, in order
            # Lookups are timed warm (time_warm): the first call of each kind is not timed.
            picked = random.Random(seed).sample(keys, min(201, len(keys)))

            def lookup(key: str) -> None:
                rec = cat.get("demo", key)
                if rec["json"].decode()["index"] != int(key.split("/")[1]):
                    raise AssertionError(f"the demo read back the wrong sample for {key}")

            report.lookup_seconds = time_warm(lookup, picked)
            report.lookups = len(picked) - 1

            size = min(1000, len(keys))
            batches = [random.Random(seed + 1 + i).sample(keys, size) for i in range(4)]
            report.batch_seconds = time_warm(
                lambda batch: cat.get_many("demo", batch).raise_for_missing(), batches
            ) / (len(batches) - 1)
            report.batch = size

            # The catalog is plain SQL: count samples per label prefix of the key, among the
            # records the latest version sees.
            latest = visibility.sql(visibility.live, "records AS r", "shards AS s")
            with cat.engine.connect() as conn:
                rows = conn.execute(
                    sa.text(
                        "SELECT substr(r.key, 1, instr(r.key, '/') - 1) AS label, count(*) AS n "
                        "FROM records r JOIN shards s ON s.id = r.shard_id "
                        "JOIN datasets d ON d.id = s.dataset_id "
                        f"WHERE d.name = 'demo' AND {latest} "
                        "GROUP BY label ORDER BY n DESC"
                    )
                    if cat.engine.dialect.name == "sqlite"
                    else sa.text(
                        "SELECT split_part(r.key, '/', 1) AS label, count(*) AS n "
                        "FROM records r JOIN shards s ON s.id = r.shard_id "
                        "JOIN datasets d ON d.id = s.dataset_id "
                        f"WHERE d.name = 'demo' AND {latest} "
                        "GROUP BY label ORDER BY n DESC"
                    )
                ).all()
            report.per_label = [(str(label), int(n)) for label, n in rows]

            t1 = time.perf_counter()
            report.streamed = read(cat, "demo", storage_options=opts).count().compute()
            report.stream_seconds = time.perf_counter() - t1
            if report.streamed != report.records:
                raise AssertionError(f"streamed {report.streamed} samples, wrote {report.records}")

        # The shards and the catalog; the folder's history may hold another catalog's runs.
        verdict = cat.verify("demo", history=False)
        if not verdict.ok:
            raise AssertionError(f"the demo dataset does not verify:\n{verdict}")
        report.verified_shards = report.shards
        gc(cat, "demo", grace=dt.timedelta(0), storage_options=opts)  # shards a rerun replaced
    return report
