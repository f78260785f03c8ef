"""The catalog at scale (issue 33): bytes per key, registration, lookups, verify and gc by size.

For each size N (``--sizes``, default ``--keys-count``) and each catalog
(``--backends sqlite,postgres``), on tiny samples (key ``img/%08d``, one
8-byte entry ``bin``, written once per size by
``benchmarks/peers/bigcatalog.py``'s ``write_tiny_shards``, ``--per-shard``
samples a shard, into ``--scratch``):

registration
    for each of ``--workers`` (1, 2, 4), into a fresh catalog: that many
    processes each register their own shards in one job
    (``register_shard(..., job=)``, as Dask workers do after writing them;
    each reads its shards' footers as it goes), then the client commits the
    job with its manifest. keys/s from the start of staging to the end of the
    commit, and each part.
floor
    the rows the 1-worker registration wrote, read back untimed, written raw
    into a copy of ``records`` with its indexes, in one transaction:
    SQLite, ``executemany`` on a raw sqlite3 connection with the catalog's
    connection settings into a fresh file; PostgreSQL,
    ``COPY ... FROM STDIN (FORMAT binary)`` of ``records``'s own binary dump
    into ``CREATE TABLE ... (LIKE records INCLUDING ALL)``. Both follow the
    schema, so a leaner ``records`` gets its own floor.
size
    bytes per key of ``records`` and of each of its indexes after ANALYZE
    (SQLite: ``dbstat``; PostgreSQL: ``pg_table_size`` and ``pg_relation_size``
    of each index), and of the whole catalog (file, or schema).
lookups
    ``Catalog.get`` of ``--points`` random keys (p50, p99 after 200 warm-up
    lookups) and ``get_many`` of ``--batch`` random keys ``--batch-repeats``
    times (median keys/s), every payload checked; each as a ratio to the
    smallest size of the run (1M in the issue's curve). Timed with the
    catalog and the shards in the page cache: the shard files and the
    catalog (SQLite: its file; PostgreSQL: ``records`` and each of its
    indexes, read by ``pg_prewarm``) are read once first, so that the curve
    measures the index, not what the floor's copy of the table evicted. The
    point lookups are also timed once before that read (``point_before_warm``:
    the cache as registration and the floor left it), and on SQLite once more
    after the batches, the same keys through new connections without a memory
    map (``point_unmapped``: ``sqlite_mmap_size`` 0, pages copied into SQLite's
    own 64 MiB cache, empty at the start).
verify, gc
    ``Catalog.verify`` (every shard read back, every CRC checked, every
    footer compared with its catalog rows; ``history=False``), at every size
    the quick verify too (``quick=True``: each shard's header and trailer,
    its rows counted in one query), and ``gc`` of the dataset after an
    aborted job left one shard of ``--gc-keys`` keys.

``--shuffle`` writes the keys in shuffled order (each shard's keys spread over
the whole key range, as in data not written sorted: the key-text index then
splits pages at random instead of growing at one end); by default they are in
order, the kindest case for that index.

``--bulk`` registers each size in one ``Catalog.register_shards`` call in this
process instead (one transaction, one version, every footer in memory: a first
load as ``register_shards``, ``reindex`` and ``rebuild_history`` make it; on
SQLite the key indexes are then built after the rows); ``--workers`` is unused.

``--dataset-options`` (JSON) are passed to ``create_dataset``: the axis for
dataset-level choices of how rows are kept. The settings ``history_in_bucket``
is off (every catalog of the run registers the same shard files, and a
folder's manifests belong to one dataset). Nothing is asserted; the figures
are printed and written (``--json``) with the load average of each phase.

    .venv/bin/python benchmarks/bench_scale.py [--keys-count 1000000] [--sizes 1e6,1e7]
        [--backends sqlite,postgres] [--workers 1,2,4] [--pg-url URL] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import multiprocessing
import os
import platform
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any
from unittest import mock

import numpy as np

# Run as a script, or imported (tests): make the benchmarks package importable.
if not __package__:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.bench_catalog import psycopg_conninfo
from benchmarks.peers.bigcatalog import payload, read_info, write_tiny_shard, write_tiny_shards
from benchmarks.peers.data import Dataset, MismatchError

from shardcat.testing.postgres import postgres_schema

DATASET = "scale"
ALIGNMENT = 8
"""Tiny samples: 8-byte alignment keeps the shard files at ~180 bytes per sample."""
DEFAULT_PG_URL = os.environ.get(
    "SHARDCAT_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
WARM_POINTS = 200


def load() -> float:
    """The 1-minute load average: the machine is shared, so every phase records it."""
    return round(os.getloadavg()[0], 2)


# --- catalogs ---------------------------------------------------------------------


class SqliteBackend:
    """Catalogs as files under ``folder``."""

    name = "sqlite"

    def __init__(self, folder: str) -> None:
        self.folder = folder
        os.makedirs(folder, exist_ok=True)

    @contextlib.contextmanager
    def fresh(self, tag: str) -> Iterator[str]:
        path = os.path.join(self.folder, f"{tag}.db")
        _remove_sqlite(path)
        try:
            yield f"sqlite:///{path}"
        finally:
            _remove_sqlite(path)

    @staticmethod
    def _path(url: str) -> str:
        return url.removeprefix("sqlite:///")

    def sizes(self, url: str) -> dict[str, int]:
        """Bytes of ``records`` and of each of its indexes (dbstat), and of the whole file."""
        conn = sqlite3.connect(self._path(url))
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            names = [
                r[0]
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE tbl_name = 'records' ORDER BY type DESC"
                )
            ]
            used = dict(
                conn.execute(
                    "SELECT name, sum(pgsize) FROM dbstat WHERE name IN "
                    f"({', '.join('?' * len(names))}) GROUP BY name",
                    names,
                ).fetchall()
            )
            (pages,) = conn.execute("PRAGMA page_count").fetchone()
            (page,) = conn.execute("PRAGMA page_size").fetchone()
        finally:
            conn.close()
        out = {("table" if n == "records" else n): int(used.get(n, 0)) for n in names}
        out["catalog"] = int(pages) * int(page)
        return out

    def warm(self, url: str) -> int:
        """Read the catalog file (and its WAL) once into the page cache; returns the bytes."""
        path = self._path(url)
        return sum(read_through(p) for p in (path, path + "-wal") if os.path.exists(p))

    def floor(self, url: str, scratch: str) -> dict[str, float]:
        """One ``executemany`` of ``records``'s rows into a fresh file's copy of the table."""
        from shardcat.catalog.sqlite_file import configure

        src = sqlite3.connect(self._path(url))
        ddl = [
            r[0]
            for r in src.execute(
                "SELECT sql FROM sqlite_master WHERE tbl_name = 'records' AND sql IS NOT NULL"
                " ORDER BY type DESC"
            )
        ]
        path = os.path.join(self.folder, "floor.db")
        _remove_sqlite(path)
        dst = sqlite3.connect(path)
        configure(dst, 30.0)  # the catalog's own connection settings
        try:
            for stmt in ddl:
                dst.execute(stmt)
            cur = src.execute("SELECT * FROM records ORDER BY shard_id, byte_offset")
            width = len(cur.description)
            sql = f"INSERT INTO records VALUES ({', '.join('?' * width)})"
            spent = 0.0
            rows = 0
            t = time.perf_counter()
            dst.execute("BEGIN")
            spent += time.perf_counter() - t
            while chunk := cur.fetchmany(100_000):  # read untimed, inserted timed
                t = time.perf_counter()
                dst.executemany(sql, chunk)
                spent += time.perf_counter() - t
                rows += len(chunk)
            t = time.perf_counter()
            dst.execute("COMMIT")
            spent += time.perf_counter() - t
        finally:
            src.close()
            dst.close()
            _remove_sqlite(path)
        return {"keys": rows, "seconds": spent, "keys_per_s": rows / spent}

    def version(self) -> str:
        return f"SQLite {sqlite3.sqlite_version}"


class PostgresBackend:
    """Catalogs as schemas of one PostgreSQL database, each created and dropped by the run."""

    name = "postgres"

    def __init__(self, url: str) -> None:
        self.url = url

    @contextlib.contextmanager
    def fresh(self, tag: str) -> Iterator[str]:
        with postgres_schema(self.url, prefix=f"scale_{tag}") as url:
            yield url

    def _connect(self, url: str) -> Any:
        import psycopg

        return psycopg.connect(psycopg_conninfo(url), autocommit=True)

    def sizes(self, url: str) -> dict[str, int]:
        """``pg_table_size`` of ``records`` (heap, TOAST, maps), each index's, the schema's."""
        with self._connect(url) as conn:
            out = {"table": int(conn.execute("SELECT pg_table_size('records')").fetchone()[0])}
            for name, size in conn.execute(
                "SELECT c.relname, pg_relation_size(i.indexrelid) FROM pg_index i"
                " JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE i.indrelid = 'records'::regclass ORDER BY c.relname"
            ):
                out[name] = int(size)
            out["catalog"] = int(
                conn.execute(
                    "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c"
                    " JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'm')"
                ).fetchone()[0]
            )
        return out

    def warm(self, url: str) -> int:
        """``pg_prewarm`` of ``records`` and its indexes; returns the bytes read.

        Into shared buffers (mode ``buffer``) when they hold the table and its indexes with a
        tenth to spare, else into the OS page cache (mode ``read``): at 10M keys and more they
        outgrow the server's default 128 MB of buffers.
        """
        with self._connect(url) as conn:
            buffers, relations = conn.execute(
                "SELECT (SELECT setting::bigint * 8192 FROM pg_settings"
                " WHERE name = 'shared_buffers'), pg_total_relation_size('records')"
            ).fetchone()
            mode = "buffer" if relations * 1.1 <= buffers else "read"
            self.warm_mode = mode
            # In the catalog's schema (dropped with it) unless the database has it already.
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
            where = conn.execute(
                "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n"
                " ON n.oid = e.extnamespace WHERE e.extname = 'pg_prewarm'"
            ).fetchone()[0]
            blocks = 0
            for (oid,) in conn.execute(
                "SELECT 'records'::regclass::oid UNION ALL"
                " SELECT indexrelid FROM pg_index WHERE indrelid = 'records'::regclass"
            ).fetchall():
                blocks += int(
                    conn.execute(
                        f'SELECT "{where}".pg_prewarm(%s::oid::regclass, %s)', (oid, mode)
                    ).fetchone()[0]
                )
            block_size = int(conn.execute("SHOW block_size").fetchone()[0])
        return blocks * block_size

    def floor(self, url: str, scratch: str) -> dict[str, float]:
        """Binary COPY of ``records``'s own dump into ``records_floor`` (LIKE records INCLUDING ALL)."""
        dump = os.path.join(scratch, "records.pgcopy")
        with self._connect(url) as conn:
            conn.execute("CREATE TABLE records_floor (LIKE records INCLUDING ALL)")
            try:
                with (
                    open(dump, "wb") as f,
                    conn.cursor() as cur,
                    cur.copy("COPY records TO STDOUT (FORMAT BINARY)") as copy,
                ):
                    for data in copy:
                        f.write(data)
                rows = int(conn.execute("SELECT count(*) FROM records").fetchone()[0])
                t = time.perf_counter()
                with (
                    open(dump, "rb") as f,
                    conn.transaction(),
                    conn.cursor() as cur,
                    cur.copy("COPY records_floor FROM STDIN (FORMAT BINARY)") as copy,
                ):
                    while chunk := f.read(1 << 20):
                        copy.write(chunk)
                spent = time.perf_counter() - t
            finally:
                conn.execute("DROP TABLE IF EXISTS records_floor")
                with contextlib.suppress(FileNotFoundError):
                    os.remove(dump)
        return {"keys": rows, "seconds": spent, "keys_per_s": rows / spent}

    def version(self) -> str:
        import psycopg

        conninfo = psycopg_conninfo(self.url)
        with psycopg.connect(conninfo) as conn:
            version, buffers, work_mem = conn.execute(
                "SELECT current_setting('server_version'), current_setting('shared_buffers'),"
                " current_setting('work_mem')"
            ).fetchone()
            return f"PostgreSQL {version} (shared_buffers {buffers}, work_mem {work_mem})"


def read_through(path: str) -> int:
    """Read a file once, in 1 MiB pieces, so the OS caches it; returns its bytes."""
    size = 0
    with open(path, "rb", buffering=0) as f:
        while piece := f.read(1 << 20):
            size += len(piece)
    return size


def warm(backend: Any, url: str, paths: list[str]) -> dict[str, Any]:
    """Read the shards and the catalog once before lookups are timed (see the module's doc)."""
    t = time.perf_counter()
    shard_bytes = sum(read_through(p) for p in paths)
    c = time.perf_counter()
    catalog_bytes = backend.warm(url)
    return {
        "shard_bytes": shard_bytes,
        "shards_s": c - t,
        "catalog_bytes": catalog_bytes,
        "catalog_s": time.perf_counter() - c,
        # PostgreSQL: into shared buffers ("buffer") or the OS page cache ("read").
        "catalog_mode": getattr(backend, "warm_mode", "read"),
        # Whether it all fits: the page cache's size after the warm-up (None off Linux).
        "page_cache_bytes": page_cache_bytes(),
        "memory_bytes": page_cache_bytes("MemTotal"),
        "load": load(),
    }


def page_cache_bytes(field: str = "Cached") -> int | None:
    """``field`` of /proc/meminfo in bytes (the page cache, by default); None where there is none."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name == field:
                    return int(rest.split()[0]) * 1024
    except OSError:
        pass
    return None


def _remove_sqlite(path: str) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path + suffix)


# --- registration -----------------------------------------------------------------


def _stage(url: str, job: int, paths: list[str], ready: Any, go: Any, out: Any) -> None:
    """One worker: register its shards in the job (each footer read as it goes)."""
    import shardcat

    try:
        with shardcat.Catalog(url) as cat:
            cat.info(DATASET)  # connect and load the schema before the clock
            ready.set()
            go.wait()
            footer = 0.0
            t = time.perf_counter()
            for path in paths:
                f = time.perf_counter()
                info = read_info(path)
                footer += time.perf_counter() - f
                cat.register_shard(DATASET, info, job=job)
            out.put(("ok", time.perf_counter() - t, footer))
    except BaseException as e:  # reported to the parent, which raises it
        out.put(("error", f"{type(e).__name__}: {e}", 0.0))
        raise


def register(
    url: str, root: str, paths: list[str], keys: int, workers: int, dataset_options: dict[str, Any]
) -> tuple[Any, dict[str, Any]]:
    """Stage ``paths`` from ``workers`` processes in one job, then commit it; returns (catalog, figures).

    The catalog stays open for the caller (it closes it).
    """
    import shardcat

    ctx = multiprocessing.get_context("spawn")  # as Dask's nanny starts its workers
    cat = shardcat.Catalog(url)
    try:
        cat.create_dataset(DATASET, root, **dataset_options)
        job = cat.begin_job(DATASET, description=f"bench_scale, {workers} worker(s)")
        go, out = ctx.Event(), ctx.Queue()
        shares = [paths[i::workers] for i in range(workers)]
        readies = [ctx.Event() for _ in shares]
        procs = [
            ctx.Process(target=_stage, args=(url, job.id, share, ready, go, out))
            for share, ready in zip(shares, readies)
        ]
        for p in procs:
            p.start()
        for ready, p in zip(readies, procs):
            while not ready.wait(0.5):
                if not p.is_alive():
                    raise RuntimeError(f"a registration worker died before it started: {p}")
        before = load()
        t = time.perf_counter()
        go.set()
        results = [out.get() for _ in procs]
        for p in procs:
            p.join()
        staged = time.perf_counter() - t
        errors = [r[1] for r in results if r[0] != "ok"]
        if errors:
            raise RuntimeError(f"registration workers failed: {errors}")
        c = time.perf_counter()
        cat.commit_job(job, shards=paths)
        committed = time.perf_counter() - c
        total = time.perf_counter() - t
    except BaseException:
        cat.close()
        raise
    return cat, {
        "workers": workers,
        "keys_per_s": keys / total,
        "seconds": total,
        "stage_s": staged,
        "commit_s": committed,
        "footer_s": max(r[2] for r in results),
        "load": [before, load()],
    }


def register_bulk(
    url: str, root: str, paths: list[str], keys: int, dataset_options: dict[str, Any]
) -> tuple[Any, dict[str, Any]]:
    """``--bulk``: every shard in one ``Catalog.register_shards`` call, in this process.

    One transaction and one version, as ``register_shards``, ``reindex`` and
    ``rebuild_history`` register a first load: on SQLite large enough to build
    the key indexes after the rows (catalog/deferred_indexes.py). Holds every
    shard's footer in memory at once. Returns (open catalog, figures).
    """
    import shardcat

    cat = shardcat.Catalog(url)
    try:
        cat.create_dataset(DATASET, root, **dataset_options)
        before = load()
        t = time.perf_counter()
        infos = [read_info(path) for path in paths]
        footer = time.perf_counter() - t
        cat.register_shards(DATASET, infos)
        total = time.perf_counter() - t
    except BaseException:
        cat.close()
        raise
    return cat, {
        "workers": 1,
        "bulk": True,
        "keys_per_s": keys / total,
        "seconds": total,
        "stage_s": total,
        "commit_s": 0.0,
        "footer_s": footer,
        "load": [before, load()],
    }


# --- lookups, verify, gc ----------------------------------------------------------


def point_lookups(cat: Any, keys: int, count: int, rng: random.Random) -> dict[str, float]:
    """p50 and p99 ms of ``Catalog.get`` of random keys, every payload checked."""
    numbers = [rng.randrange(keys) for _ in range(count + WARM_POINTS)]
    times: list[float] = []
    clock = time.perf_counter_ns
    get = cat.get
    for n, i in enumerate(numbers):
        key = Dataset.key(i)
        t = clock()
        rec = get(DATASET, key)
        dt_ns = clock() - t
        if rec["bin"].data != payload(i):
            raise MismatchError(f"wrong payload for {key} in a {keys:,}-key catalog")
        if n >= WARM_POINTS:
            times.append(dt_ns / 1e6)
    arr = np.asarray(times)
    return {
        "count": count,
        "p50_ms": float(np.percentile(arr, 50)),
        "p99_ms": float(np.percentile(arr, 99)),
    }


def unmapped_point_lookups(url: str, keys: int, count: int, rng: random.Random) -> dict[str, Any]:
    """:func:`point_lookups` through a second catalog whose connections copy pages, not map them.

    ``sqlite_mmap_size`` 0: the same warm catalog and shards and (``rng`` in the state
    ``point``'s was) the same keys, SQLite's own page cache alone, which starts empty on
    these new connections (what a new process meets) and is filled by the warm-up only
    in part.
    """
    import shardcat

    with shardcat.config.set(sqlite_mmap_size=0):
        other = shardcat.Catalog(url)
        try:
            return {**point_lookups(other, keys, count, rng), "load": load()}
        finally:
            other.close()


def batch_lookups(
    cat: Any, keys: int, size: int, repeats: int, rng: random.Random
) -> dict[str, float]:
    """Median keys/s of ``get_many`` of ``size`` random keys, every payload checked."""
    size = min(size, keys)
    spent: list[float] = []
    for r in range(repeats + 1):  # the first batch warms up
        numbers = rng.sample(range(keys), size)
        batch = [Dataset.key(i) for i in numbers]
        t = time.perf_counter()
        result = cat.get_many(DATASET, batch)
        elapsed = time.perf_counter() - t
        for i, rec in zip(numbers, result.records):
            if rec is None or rec["bin"].data != payload(i):
                raise MismatchError(f"get_many: wrong or missing {Dataset.key(i)}")
        if r:
            spent.append(elapsed)
    return {"size": size, "repeats": repeats, "keys_per_s": size / statistics.median(spent)}


def verify(cat: Any, keys: int, *, quick: bool = False) -> dict[str, Any]:
    t = time.perf_counter()
    report = cat.verify(DATASET, history=False, quick=quick)
    seconds = time.perf_counter() - t
    if report.problems or report.records_checked != keys:
        raise MismatchError(
            f"verify of {keys:,} keys found {report.records_checked:,} records and "
            f"problems {report.problems[:3]}"
        )
    return {"seconds": seconds, "load": load()}


def gc_after_abort(cat: Any, root: str, number: int, gc_keys: int) -> dict[str, Any]:
    """Abort a job that staged one shard, then time ``gc`` of the dataset (it removes the shard)."""
    from shardcat.orchestration.gc import gc

    job = cat.begin_job(DATASET, description="bench_scale: aborted, for gc")
    # Keys outside the dataset's range (their numbers follow the last shard's).
    lo = (number + 1) * 10**10
    path = write_tiny_shard(root, number, lo, lo + gc_keys, ALIGNMENT)
    cat.register_shard(DATASET, read_info(path), job=job)
    cat.abort_job(job)
    t = time.perf_counter()
    report = gc(cat, DATASET)
    seconds = time.perf_counter() - t
    if report.deleted_shards != [path] or report.orphans or os.path.exists(path):
        raise MismatchError(f"gc did not remove exactly the aborted job's shard: {report}")
    return {"seconds": seconds, "removed_keys": gc_keys, "load": load()}


# --- the run ----------------------------------------------------------------------


def shards_for(
    scratch: str, keys: int, per_shard: int, processes: int, *, shuffle: bool = False
) -> list[str]:
    """The size's shard files, written once (kept in ``scratch`` between runs with --keep)."""
    folder = os.path.join(scratch, f"shards-{keys}-{per_shard}{'-shuffled' if shuffle else ''}")
    done = os.path.join(folder, "_complete")
    if os.path.exists(done):
        with open(done) as f:
            return json.load(f)  # type: ignore[no-any-return]
    shutil.rmtree(folder, ignore_errors=True)
    paths = write_tiny_shards(
        folder, keys, per_shard, processes=processes, alignment=ALIGNMENT, shuffle=shuffle
    )
    with open(done, "w") as f:
        json.dump(paths, f)
    return paths


def measure_size(
    backend: Any, scratch: str, keys: int, args: argparse.Namespace, rng: random.Random
) -> dict[str, Any]:
    per_shard = min(args.per_shard, max(1, -(-keys // 8)))  # at least 8 shards for 4 workers
    t = time.perf_counter()
    paths = shards_for(scratch, keys, per_shard, args.write_processes, shuffle=args.shuffle)
    root = os.path.dirname(paths[0])
    out: dict[str, Any] = {
        "backend": backend.name,
        "keys": keys,
        "shards": len(paths),
        "per_shard": per_shard,
        "dataset_options": args.dataset_options,
        "shuffled": args.shuffle,
        "bulk": args.bulk,
        "shards_ready_s": time.perf_counter() - t,
        "registration": {},
    }
    log(f"{backend.name} {keys:,} keys: {len(paths)} shards ready")
    for n, workers in enumerate([1] if args.bulk else args.workers):
        with backend.fresh(f"{keys}_w{workers}") as url:
            if args.bulk:
                cat, reg = register_bulk(url, root, paths, keys, args.dataset_options)
            else:
                cat, reg = register(url, root, paths, keys, workers, args.dataset_options)
            try:
                out["registration"][str(workers)] = reg
                log(f"  {workers} worker(s): {reg['keys_per_s']:,.0f} keys/s")
                if n:
                    continue
                cat.analyze()
                out["bytes"] = backend.sizes(url)
                out["floor"] = None
                if args.floor_max_keys is None or keys <= args.floor_max_keys:
                    out["floor"] = {**backend.floor(url, scratch), "load": load()}
                    log(f"  floor: {out['floor']['keys_per_s']:,.0f} keys/s")
                out["point_before_warm"] = {
                    **point_lookups(cat, keys, args.points, rng),
                    "load": load(),
                }
                out["warm"] = warm(backend, url, paths)
                cached = out["warm"]["page_cache_bytes"]
                log(
                    f"  warmed: shards {out['warm']['shard_bytes'] / 1e9:.2f} GB in "
                    f"{out['warm']['shards_s']:.1f} s, catalog "
                    f"{out['warm']['catalog_bytes'] / 1e9:.2f} GB in {out['warm']['catalog_s']:.1f} s"
                    f" ({out['warm']['catalog_mode']})"
                    + (f"; page cache {cached / 1e9:.2f} GB" if cached is not None else "")
                )
                same_keys = random.Random()
                same_keys.setstate(rng.getstate())  # point_unmapped looks up the same keys
                out["point"] = {**point_lookups(cat, keys, args.points, rng), "load": load()}
                out["batch"] = {
                    **batch_lookups(cat, keys, args.batch, args.batch_repeats, rng),
                    "load": load(),
                }
                if backend.name == "sqlite":
                    out["point_unmapped"] = unmapped_point_lookups(
                        url, keys, args.points, same_keys
                    )
                log(
                    f"  lookups: p50 {out['point']['p50_ms']:.4f} ms (before warm-up "
                    f"{out['point_before_warm']['p50_ms']:.4f}"
                    + (
                        f", without the memory map {out['point_unmapped']['p50_ms']:.4f}"
                        if "point_unmapped" in out
                        else ""
                    )
                    + ")"
                )
                checks = args.verify and (
                    args.verify_max_keys is None or keys <= args.verify_max_keys
                )
                out["verify"] = verify(cat, keys) if checks else None
                out["verify_quick"] = verify(cat, keys, quick=True)
                out["gc"] = gc_after_abort(cat, root, len(paths), args.gc_keys)
                log("  verify, gc done")
            finally:
                cat.close()
    return out


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {load():.2f}] {message}", file=sys.stderr)


def relate(results: list[dict[str, Any]]) -> None:
    """Ratios of each size's lookups to the smallest size's, per backend, in place."""
    for backend in {r["backend"] for r in results}:
        rows = sorted((r for r in results if r["backend"] == backend), key=lambda r: r["keys"])
        base = rows[0]
        for r in rows:
            r["vs_smallest"] = {
                "keys": base["keys"],
                "point_p50": r["point"]["p50_ms"] / base["point"]["p50_ms"],
                "point_p99": r["point"]["p99_ms"] / base["point"]["p99_ms"],
                "batch": r["batch"]["keys_per_s"] / base["batch"]["keys_per_s"],
            }


def records_bytes(result: dict[str, Any]) -> int:
    """Bytes of ``records`` and all its indexes (what the issue's bytes-per-key goal counts)."""
    return sum(size for name, size in result["bytes"].items() if name != "catalog")


def table(results: list[dict[str, Any]]) -> str:
    """The run as text: one line per catalog and size, then bytes per key of each relation."""
    workers = sorted({w for r in results for w in r["registration"]}, key=int)
    head = (
        f"{'catalog':9} {'keys':>12} {'B/key':>6} {'floor k/s':>10} "
        + " ".join(f"{w + ' wkr k/s':>11} {'ratio':>5}" for w in workers)
        + f" {'p50 ms':>7} {'p99 ms':>7} {'x':>5} {'cold p50':>8} {'batch k/s':>9} {'x':>5}"
        f" {'verify s':>8} {'quick s':>7} {'gc s':>6}"
    )
    lines = [head]
    for r in results:
        floor = r["floor"]["keys_per_s"] if r["floor"] else None
        regs = " ".join(
            f"{r['registration'][w]['keys_per_s']:11,.0f} "
            + (f"{r['registration'][w]['keys_per_s'] / floor:5.2f}" if floor else f"{'-':>5}")
            for w in workers
        )
        rel = r["vs_smallest"]
        verify_s = f"{r['verify']['seconds']:8.1f}" if r["verify"] else f"{'-':>8}"
        lines.append(
            f"{r['backend']:9} {r['keys']:12,} {records_bytes(r) / r['keys']:6.1f} "
            + (f"{floor:10,.0f}" if floor else f"{'-':>10}")
            + f" {regs} {r['point']['p50_ms']:7.4f} {r['point']['p99_ms']:7.4f} "
            f"{rel['point_p50']:5.2f} {r['point_before_warm']['p50_ms']:8.4f} "
            f"{r['batch']['keys_per_s']:9,.0f} {rel['batch']:5.2f} "
            f"{verify_s} {r['verify_quick']['seconds']:7.2f} {r['gc']['seconds']:6.2f}"
        )
    lines.append("")
    lines.append("B/key: records and its indexes; each of them; registration parts (s):")
    for r in results:
        parts = ", ".join(
            f"{name} {size / r['keys']:.1f}"
            for name, size in r["bytes"].items()
            if name != "catalog"
        )
        regs = "; ".join(
            f"{w}: stage {g['stage_s']:.1f} (footers {g['footer_s']:.1f}) + commit {g['commit_s']:.1f}"
            for w, g in r["registration"].items()
        )
        lines.append(
            f"  {r['backend']} {r['keys']:,}: {parts} (whole catalog "
            f"{r['bytes']['catalog'] / r['keys']:.1f})"
        )
        lines.append(f"    {regs}")
    return "\n".join(lines)


def parse_count(text: str) -> int:
    """``1000000``, ``1e6`` or ``1_000_000``."""
    value = float(text.replace("_", ""))
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"not a whole number of keys: {text!r}")
    return int(value)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],  # type: ignore[union-attr]
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--keys-count", type=parse_count, default=1_000_000)
    ap.add_argument(
        "--sizes",
        type=lambda s: [parse_count(x) for x in s.split(",")],
        default=None,
        help="comma-separated key counts (1e6,1e7); default --keys-count",
    )
    ap.add_argument("--backends", default="sqlite,postgres")
    ap.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4])
    ap.add_argument("--pg-url", default=DEFAULT_PG_URL)
    ap.add_argument("--per-shard", type=parse_count, default=100_000)
    ap.add_argument("--points", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--batch-repeats", type=int, default=5)
    ap.add_argument("--gc-keys", type=int, default=1000)
    ap.add_argument("--no-verify", dest="verify", action="store_false")
    ap.add_argument(
        "--verify-max-keys",
        type=parse_count,
        default=None,
        help="run verify only at sizes up to this (it reads and compares every record)",
    )
    ap.add_argument(
        "--floor-max-keys",
        type=parse_count,
        default=None,
        help="measure the floor only at sizes up to this (it writes a second copy of records)",
    )
    ap.add_argument(
        "--dataset-options",
        type=json.loads,
        default={},
        help='JSON keyword arguments of create_dataset, e.g. \'{"keys": "hash"}\'',
    )
    ap.add_argument(
        "--shuffle",
        action="store_true",
        help="write each size's keys in shuffled order, not in order (the key index's worst case)",
    )
    ap.add_argument(
        "--bulk",
        action="store_true",
        help="register each size in one register_shards call (one transaction, one process) "
        "instead of a job staged by --workers processes",
    )
    ap.add_argument("--write-processes", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--scratch", default=None, help="folder for shards and SQLite catalogs")
    ap.add_argument("--keep", action="store_true", help="keep the shards in --scratch")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    args.command = " ".join(["benchmarks/bench_scale.py", *given])
    args.sizes = sorted(args.sizes or [args.keys_count])
    args.workers = sorted(set(args.workers))
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure every size on every backend; returns what ``--json`` writes."""
    import shardcat.config

    # Spawned workers inherit the variable; a caller's environment is left as it was.
    with mock.patch.dict(os.environ, {"SHARDCAT_HISTORY_IN_BUCKET": "0"}):
        shardcat.config.refresh()
        try:
            return _run(args)
        finally:
            shardcat.config.refresh()


def _run(args: argparse.Namespace) -> dict[str, Any]:
    scratch = args.scratch or tempfile.mkdtemp(prefix="shardcat-scale-")
    os.makedirs(scratch, exist_ok=True)
    backends: list[Any] = []
    for name in args.backends.split(","):
        if name == "sqlite":
            backends.append(SqliteBackend(os.path.join(scratch, "catalogs")))
        elif name == "postgres":
            backends.append(PostgresBackend(args.pg_url))
        else:
            raise SystemExit(f"unknown backend {name!r}: sqlite or postgres")
    info: dict[str, Any] = {
        "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": args.command,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "databases": [b.version() for b in backends],
        "load_at_start": list(os.getloadavg()),
        "disk_free_gb": round(shutil.disk_usage(scratch).free / 1e9, 1),
    }
    results: list[dict[str, Any]] = []
    try:
        for keys in args.sizes:
            for backend in backends:
                rng = random.Random(args.seed)
                results.append(measure_size(backend, scratch, keys, args, rng))
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    relate(results)
    info["load_at_end"] = list(os.getloadavg())
    return {"run": info, "results": results}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    out = run(args)
    info = out["run"]
    print(
        f"shardcat catalog at scale: {', '.join(info['databases'])}, {info['cpus']} CPUs, "
        f"python {info['python']}, load {info['load_at_start'][0]:.2f} at start, "
        f"{info['load_at_end'][0]:.2f} at end ({info['started']})"
    )
    print(f"command: {info['command']}")
    print(
        "ratio: registration keys/s / the floor's; x: lookups at this size / at "
        f"{out['results'][0]['vs_smallest']['keys']:,} keys (p50 ms: lower is better)"
    )
    print(table(out["results"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
