"""Plain vs hash-partitioned ``records`` on PostgreSQL: point lookups and batches (docs/SCALE.md §6).

One set of tiny shards (``--keys-count`` keys ``img/%08d``, one 8-byte entry,
``benchmarks/peers/bigcatalog.py``), registered into one catalog per layout
(``--layouts``: 0 is the plain table, P > 0 the ``record_partitions``
setting's P partitions), each in a schema of its own, in one job, then
``Catalog.analyze()``. The shard files and every partition of ``records`` and
its indexes are read once into the page cache (``pg_prewarm``, mode ``read``),
then, per layout: ``Catalog.get`` of ``--points`` random keys (p50, p99 after
200 warm-up lookups) and ``get_many`` of ``--batch`` random keys
``--batch-repeats`` times (median keys/s), every payload checked, with each
of the two batch statements (:func:`shardcat.reading.statements.batch_sql`:
``key_hash = ANY($1)``, which shardcat runs on a plain table, and
``IN (SELECT unnest($1))``, which it runs on a partitioned one), alternating;
each statement alone (``--statement-repeats``, median ms: prepared, generic
plans, rows fetched, no shard read); and ``EXPLAIN (ANALYZE, TIMING OFF)`` of one batch of each (the index scans
of ``records`` and their loops: one probe per key when each is pruned to its
partition).
``--convert P``: then the plain catalog's conversion to P partitions and back
(``shardcat catalog partition``'s function), timed, the key count checked after.
Nothing is asserted; the figures are printed (``--json``: written) with the
load average.

    .venv/bin/python benchmarks/bench_partitions.py [--keys-count 1000000] [--layouts 0,16]
        [--pg-url URL] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

# Run as a script, or imported (tests): make the benchmarks package importable.
if not __package__:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.bench_catalog import psycopg_conninfo
from benchmarks.bench_scale import load, point_lookups, read_through
from benchmarks.peers.bigcatalog import payload, read_info, write_tiny_shards
from benchmarks.peers.data import Dataset, MismatchError

DATASET = "scale"
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def batch_of(kind: str) -> str:
    """The batch statement ``kind``: ``unnest`` (shardcat's on a partitioned records) or ``any``."""
    from shardcat.reading import statements

    return statements.batch_sql("postgresql", partitioned=kind == "unnest")


@contextlib.contextmanager
def batch_statement(kind: str) -> Iterator[None]:
    """Lookups opened inside run ``kind``'s batch statement whatever records' layout."""
    from shardcat.reading import statements

    real = statements.batch_sql

    def forced(
        dialect: str, visible: str = statements.COMMITTED, entries: bool = False, **_: Any
    ) -> str:
        return real(dialect, visible, entries, partitioned=kind == "unnest")

    statements.batch_sql = forced  # type: ignore[assignment]
    try:
        yield
    finally:
        statements.batch_sql = real  # type: ignore[assignment]


def connect(url: str) -> Any:
    import psycopg

    return psycopg.connect(psycopg_conninfo(url), autocommit=True)


def warm(url: str) -> int:
    """``pg_prewarm`` (into the OS page cache) of every partition of ``records`` and its indexes."""
    with connect(url) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        where = conn.execute(
            "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n"
            " ON n.oid = e.extnamespace WHERE e.extname = 'pg_prewarm'"
        ).fetchone()[0]
        leaves = "SELECT 'records'::regclass::oid AS oid UNION SELECT relid::oid FROM pg_partition_tree('records') WHERE isleaf"
        blocks = 0
        for (oid,) in conn.execute(
            f"SELECT t.oid FROM ({leaves}) t JOIN pg_class c ON c.oid = t.oid WHERE c.relkind = 'r'"
            f" UNION ALL SELECT i.indexrelid FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid"
            f" WHERE i.indrelid IN ({leaves}) AND x.relkind = 'i'"
        ).fetchall():
            blocks += int(
                conn.execute(
                    f'SELECT "{where}".pg_prewarm(%s::oid::regclass, %s)', (oid, "read")
                ).fetchone()[0]
            )
        return blocks * int(conn.execute("SHOW block_size").fetchone()[0])


def register(url: str, root: str, paths: list[str], partitions: int) -> dict[str, Any]:
    import shardcat
    import shardcat.config

    t = time.perf_counter()
    with (
        shardcat.config.set(record_partitions=partitions, history_in_bucket=False),
        shardcat.Catalog(url) as cat,
    ):
        cat.create_dataset(DATASET, root)
        job = cat.begin_job(DATASET)
        for path in paths:
            cat.register_shard(DATASET, read_info(path), job=job)
        cat.commit_job(job, shards=paths)
        cat.analyze()
    return {"seconds": time.perf_counter() - t, "load": load()}


def batch_pair(
    cat: Any, cats: dict[str, Any], keys: int, size: int, repeats: int, rng: random.Random
) -> dict[str, float]:
    """Median keys/s of ``get_many`` of ``size`` random keys per statement, alternating."""
    spent: dict[str, list[float]] = {k: [] for k in cats}
    for r in range(repeats + 1):  # the first round warms up
        for kind, c in cats.items():
            numbers = rng.sample(range(keys), size)
            batch = [Dataset.key(i) for i in numbers]
            t = time.perf_counter()
            result = c.get_many(DATASET, batch)
            elapsed = time.perf_counter() - t
            for i, rec in zip(numbers, result.records):
                if rec is None or rec["bin"].data != payload(i):
                    raise MismatchError(f"get_many ({kind}): wrong or missing {Dataset.key(i)}")
            if r:
                spent[kind].append(elapsed)
    return {f"{kind}_keys_per_s": size / statistics.median(s) for kind, s in spent.items()}


def statement_times(
    url: str, keys: int, size: int, repeats: int, rng: random.Random
) -> dict[str, float]:
    """Median ms of each batch statement alone (its rows fetched, no shard read), alternating,
    prepared with generic plans as the lookups run them (catalog/connection.py)."""
    from shardcat.format.checksums import signed_key_hashes

    spent: dict[str, list[float]] = {"unnest": [], "any": []}
    with connect(url) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        for r in range(repeats + 3):  # three rounds warm up (prepare, then plan)
            for kind in spent:
                hashes = signed_key_hashes(
                    Dataset.key(i).encode() for i in rng.sample(range(keys), size)
                )
                t = time.perf_counter()
                rows = conn.execute(batch_of(kind), (DATASET, hashes), prepare=True).fetchall()
                elapsed = time.perf_counter() - t
                if len(rows) != size:
                    raise MismatchError(f"{kind}: {len(rows)} rows for {size} keys")
                if r >= 3:
                    spent[kind].append(elapsed * 1e3)
    return {f"{kind}_ms": statistics.median(s) for kind, s in spent.items()}


def explain(url: str, keys: int, size: int, rng: random.Random) -> dict[str, Any]:
    """EXPLAIN ANALYZE of one batch per statement: time, partitions scanned, index loops."""
    from shardcat.format.checksums import signed_key_hashes

    hashes = signed_key_hashes(Dataset.key(i).encode() for i in rng.sample(range(keys), size))
    out: dict[str, Any] = {}
    with connect(url) as conn:
        for kind in ("unnest", "any"):
            sql = batch_of(kind)
            plan = "\n".join(
                r[0]
                for r in conn.execute(
                    "EXPLAIN (ANALYZE, TIMING OFF, COSTS OFF) " + sql, (DATASET, hashes)
                ).fetchall()
            )
            scans = re.findall(r"Index (?:Only )?Scan using \S+ on (\S+) .*loops=(\d+)\)", plan)
            out[kind] = {
                "ms": float(re.search(r"Execution Time: ([\d.]+) ms", plan).group(1)),  # type: ignore[union-attr]
                "records_scans": [(t, int(n)) for t, n in scans if t.startswith("records")],
                "plan": re.sub(r"'\{[^}]*\}'", "'{...}'", plan),
            }
    return out


def convert(url: str, partitions: int, keys: int) -> dict[str, Any]:
    """Seconds of ``shardcat catalog partition`` (its function) to ``partitions`` and back to 0."""
    import shardcat
    from shardcat.catalog import partition_records

    out: dict[str, Any] = {}
    for p in (partitions, 0):
        before = load()
        t = time.perf_counter()
        partition_records(url, p)
        out[f"to_{p}_s"] = time.perf_counter() - t
        out[f"to_{p}_load"] = [before, load()]
    with shardcat.Catalog(url) as cat:
        if cat.count(DATASET) != keys:
            raise MismatchError(f"{cat.count(DATASET)} keys after the conversions, not {keys}")
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    import shardcat
    from shardcat.testing.postgres import postgres_schema

    scratch = args.scratch or tempfile.mkdtemp(prefix="bench_partitions_")
    rng = random.Random(args.seed)
    results: dict[str, Any] = {"keys": args.keys_count, "layouts": {}}
    try:
        folder = os.path.join(scratch, f"shards_{args.keys_count}")
        os.makedirs(folder, exist_ok=True)
        t = time.perf_counter()
        paths = write_tiny_shards(
            folder, args.keys_count, args.per_shard, processes=args.write_processes
        )
        print(f"wrote {len(paths)} shards in {time.perf_counter() - t:.1f} s", flush=True)
        for partitions in args.layouts:
            with postgres_schema(args.pg_url, prefix=f"parts{partitions}") as url:
                reg = register(url, folder, paths, partitions)
                print(f"P={partitions}: registered in {reg['seconds']:.1f} s", flush=True)
                for p in paths:
                    read_through(p)
                catalog_bytes = warm(url)
                with contextlib.ExitStack() as stack:
                    cats = {}
                    for kind in ("unnest", "any"):
                        with batch_statement(kind):
                            cats[kind] = stack.enter_context(shardcat.Catalog(url))
                            # This thread's lookup is made now, with this statement.
                            if cats[kind]._lookup()._batch != batch_of(kind):
                                raise RuntimeError(f"the {kind} catalog runs another statement")
                    before = load()
                    point = point_lookups(cats["unnest"], args.keys_count, args.points, rng)
                    batch = batch_pair(
                        cats["unnest"], cats, args.keys_count, args.batch, args.batch_repeats, rng
                    )
                    alone = statement_times(
                        url, args.keys_count, args.batch, args.statement_repeats, rng
                    )
                    explained = explain(url, args.keys_count, args.batch, rng)
                    figures = {
                        "registration": reg,
                        "catalog_bytes": catalog_bytes,
                        "point": point,
                        "batch": batch,
                        "statement": alone,
                        "explain": {
                            k: {kk: vv for kk, vv in v.items() if kk != "plan"}
                            for k, v in explained.items()
                        },
                        "load": [before, load()],
                    }
                if args.convert and not partitions:
                    figures["convert"] = convert(url, args.convert, args.keys_count)
                    print(f"  converted: {figures['convert']}", flush=True)
                results["layouts"][str(partitions)] = figures
                print(
                    json.dumps(
                        {"P": partitions, **{k: v for k, v in figures.items() if k != "explain"}}
                    ),
                    flush=True,
                )
                for kind, e in explained.items():
                    scans = e["records_scans"]
                    print(
                        f"  EXPLAIN {kind}: {e['ms']:.1f} ms, {len(scans)} records index scan node(s), "
                        f"loops {sum(n for _, n in scans)}",
                        flush=True,
                    )
                if args.show_plans:
                    for kind, e in explained.items():
                        print(f"--- {kind}\n{e['plan']}")
    finally:
        if not args.keep and not args.scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return results


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--keys-count", type=int, default=1_000_000)
    ap.add_argument("--layouts", type=lambda s: [int(x) for x in s.split(",")], default=[0, 16])
    ap.add_argument("--pg-url", default=DEFAULT_PG_URL)
    ap.add_argument("--per-shard", type=int, default=100_000)
    ap.add_argument("--points", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--batch-repeats", type=int, default=7)
    ap.add_argument("--statement-repeats", type=int, default=31)
    ap.add_argument(
        "--convert",
        type=int,
        default=0,
        help="after the plain layout's lookups, time its conversion to this many partitions "
        "and back (shardcat catalog partition); 0: not",
    )
    ap.add_argument("--write-processes", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--scratch", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--show-plans", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default=None)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    results = run(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
