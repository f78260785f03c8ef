"""The cost of committing a job of many keys (issue 33), without registering them one by one.

Registering 10M real rows takes half an hour here, so this builds the staged state
directly: a few real one-record shards are written and staged in one job through the
public API (``register_shard(..., job=)``), then SQL multiplies rows under those staged
shards (``generate_series`` on PostgreSQL, a recursive CTE on SQLite): distinct keys
``img/%09d`` and distinct, random-looking ``key_hash`` values, with the spans and layout of
a real record. Then ``Catalog.commit_job(job, shards=...)`` (what a Dask write's barrier
task calls) is timed, and every statement it runs is timed on its own.

``--base-keys N`` first commits a job of N other keys, so the timed commit also probes a
dataset that has committed records (the duplicate check against them).
``--explain`` runs ``EXPLAIN (ANALYZE, BUFFERS)`` (PostgreSQL) or ``EXPLAIN QUERY PLAN``
(SQLite) of each SELECT the commit runs, right before it, and prints the plans (the
statement is then run twice: the figures of an ``--explain`` run are not the timings).

Example::

    python benchmarks/bench_commit_scale.py --backend sqlite --keys 1e6
    python benchmarks/bench_commit_scale.py --backend postgres --keys 1e7 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections import defaultdict
from typing import Any

import sqlalchemy as sa

import shardcat

DATASET = "commitscale"
DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"

# A distinct, random-looking int8 per n < 2**31 (int8 arithmetic on both databases): the high
# bits are a multiplicative hash of n, the low part n itself, so no two n share a value.
_HASH = "(((n * 2654435761) % 4294967296) * 2147483647 + n - 4611686018427387904)"


def load() -> float:
    return os.getloadavg()[0]


def _pg_admin(url: str, sql: str) -> None:
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text(sql))
    admin.dispose()


def catalog_url(args: argparse.Namespace, scratch: str) -> str:
    if args.backend == "sqlite":
        return f"sqlite:///{scratch}/catalog.db"
    base = sa.make_url(args.pg_url)
    if not args.reuse:
        _pg_admin(args.pg_url, f"DROP DATABASE IF EXISTS {args.pg_database}")
        _pg_admin(args.pg_url, f"CREATE DATABASE {args.pg_database}")
    query = {"options": f"-c statement_timeout={args.pg_timeout}s"} if args.pg_timeout else {}
    return base.set(database=args.pg_database, query=query).render_as_string(hide_password=False)


def staged_job(cat: Any) -> tuple[Any, list[str]]:
    """The open job a ``--keep`` run left (its commit failed or was stopped), and its shard URLs."""
    with cat.engine.connect() as c:
        rows = c.execute(
            sa.text(
                "SELECT j.id, s.url FROM jobs j JOIN shards s ON s.job_id = j.id "
                "WHERE j.state = 'open' AND s.state = 'staged' ORDER BY s.id"
            )
        ).all()
    if not rows:
        raise SystemExit("--reuse: the catalog has no open job with staged shards")
    return cat.job(rows[0][0]), [url for _, url in rows]


def stage(
    cat: Any, root: str, first: int, keys: int, shards: int, tag: str
) -> tuple[Any, list[str]]:
    """A job of ``keys`` keys (``img/{first:09d}``...) staged in ``shards`` shards; returns (job, urls)."""
    folder = os.path.join(root, tag)
    with shardcat.RollingShardWriter(folder, max_records=1) as writer:
        for i in range(shards):
            writer.add(f"seed/{tag}/{i:06d}", {"bin": b"x" * 100, "json": b'{"label": 1}'})
    job = cat.begin_job(DATASET, description=f"bench_commit_scale {tag}")
    for info in writer.shards:
        cat.register_shard(DATASET, info, job=job)
    with cat.engine.begin() as c:
        ids = [
            int(r[0])
            for r in c.execute(
                sa.text("SELECT id FROM shards WHERE job_id = :j ORDER BY id"), {"j": job.id}
            )
        ]
        ds, length, layout, spans = c.execute(
            sa.text(
                "SELECT r.dataset_id, r.byte_length, r.layout_id, r.spans FROM records r "
                "JOIN shards s ON s.id = r.shard_id WHERE s.job_id = :j LIMIT 1"
            ),
            {"j": job.id},
        ).one()
        per = -(-keys // shards)
        sqlite = cat.engine.dialect.name == "sqlite"
        for i, sid in enumerate(ids):
            lo, hi = first + i * per, min(first + keys, first + (i + 1) * per) - 1
            if lo > hi:
                break
            numbers = (
                "WITH RECURSIVE g(n) AS (SELECT :lo UNION ALL SELECT n + 1 FROM g WHERE n < :hi) "
                if sqlite
                else ""
            )
            source = (
                "g"
                if sqlite
                else "generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS g(n)"
            )
            key = "printf('img/%09d', n)" if sqlite else "'img/' || lpad(n::text, 9, '0')"
            # Offsets past the real record's (offset 0.., under 1 GB): no primary key clash.
            c.execute(
                sa.text(
                    f"{numbers}INSERT INTO records (shard_id, byte_offset, dataset_id, key_hash, "
                    "key, byte_length, layout_id, spans, removed_version, group_id) "
                    f"SELECT :sid, 1000000000 + n * 256, :ds, {_HASH}, {key}, :len, :layout, "
                    f":spans, NULL, 0 FROM {source}"
                ),
                {
                    "sid": sid,
                    "lo": lo,
                    "hi": hi,
                    "ds": ds,
                    "len": length,
                    "layout": layout,
                    "spans": spans,
                },
            )
        # The shards' rows say what they hold, as registration's would (the manifest trusts them).
        c.execute(
            sa.text(
                "UPDATE shards SET record_count = "
                "(SELECT count(*) FROM records WHERE records.shard_id = shards.id) WHERE job_id = :j"
            ),
            {"j": job.id},
        )
    return job, [info.path for info in writer.shards]


class StatementClock:
    """Times each statement the engine runs (and optionally explains each SELECT first)."""

    def __init__(self, engine: sa.Engine, explain: bool) -> None:
        self.engine = engine
        self.explain = explain
        self.times: dict[str, float] = defaultdict(float)
        self.plans: list[tuple[str, str]] = []
        self._start: list[float] = []
        sa.event.listen(engine, "before_cursor_execute", self._before)
        sa.event.listen(engine, "after_cursor_execute", self._after)

    def close(self) -> None:
        sa.event.remove(self.engine, "before_cursor_execute", self._before)
        sa.event.remove(self.engine, "after_cursor_execute", self._after)

    def _before(
        self, conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool
    ) -> None:
        if self.explain and statement.lstrip().upper().startswith(("SELECT", "WITH")) and not many:
            pg = self.engine.dialect.name == "postgresql"
            prefix = "EXPLAIN (ANALYZE, BUFFERS) " if pg else "EXPLAIN QUERY PLAN "
            t = time.perf_counter()
            cursor.execute(prefix + statement, params)
            rows = cursor.fetchall()
            took = time.perf_counter() - t
            plan = "\n".join(str(r[-1]) for r in rows)
            self.plans.append((f"{' '.join(statement.split())[:300]}  [{took:.2f} s]", plan))
        self._start.append(time.perf_counter())

    def _after(
        self, conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool
    ) -> None:
        took = time.perf_counter() - self._start.pop()
        self.times[" ".join(statement.split())[:160]] += took


def run(args: argparse.Namespace) -> dict[str, Any]:
    scratch = args.scratch or tempfile.mkdtemp(prefix="bench-commit-scale-")
    os.makedirs(scratch, exist_ok=True)
    url = catalog_url(args, scratch)
    out: dict[str, Any] = {"backend": args.backend, "keys": args.keys, "base_keys": args.base_keys}
    try:
        with shardcat.Catalog(url) as cat:
            t = time.perf_counter()
            if args.reuse:
                job, urls = staged_job(cat)
                args.keys = out["keys"] = job.record_count
            else:
                cat.create_dataset(DATASET, os.path.join(scratch, "data"))
                if args.base_keys:
                    base, base_urls = stage(cat, scratch, 0, args.base_keys, args.shards, "base")
                    cat.commit_job(base, shards=base_urls)
                job, urls = stage(cat, scratch, args.base_keys, args.keys, args.shards, "job")
            if args.analyze:  # else the planner's statistics are what autovacuum left
                cat.analyze()
            out["build_s"] = time.perf_counter() - t
            print(
                f"built {args.keys:,} staged keys (+{args.base_keys:,} committed) in {out['build_s']:.1f} s"
            )
            clock = StatementClock(cat.engine, args.explain)
            before = load()
            t = time.perf_counter()
            try:
                cat.commit_job(job, shards=urls)
            finally:
                took = time.perf_counter() - t
                clock.close()
            out.update(
                commit_s=took,
                keys_per_s=args.keys / took,
                load=[before, load()],
                statements={
                    k: round(v, 3) for k, v in sorted(clock.times.items(), key=lambda kv: -kv[1])
                },
            )
            print(
                f"commit of {args.keys:,} keys: {took:.2f} s ({args.keys / took:,.0f} keys/s), load {before:.2f} -> {load():.2f}"
            )
            for stmt, s in list(out["statements"].items())[: args.top]:
                print(f"  {s:9.3f} s  {stmt}")
            for head, plan in clock.plans:
                print(f"\n-- {head}\n{plan}")
            if clock.plans:
                out["plans"] = [{"statement": h, "plan": p} for h, p in clock.plans]
    finally:
        if args.backend == "postgres" and not args.keep:
            _pg_admin(args.pg_url, f"DROP DATABASE IF EXISTS {args.pg_database}")
        if not args.keep and args.scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    count = lambda s: int(float(s))  # noqa: E731
    ap.add_argument("--keys", type=count, default=1_000_000, help="keys of the timed job (1e6 ok)")
    ap.add_argument("--base-keys", type=count, default=0, help="keys committed before it")
    ap.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--shards", type=int, default=10, help="staged shards the keys are spread over")
    ap.add_argument(
        "--pg-url", default=DEFAULT_PG, help="a server database to create --pg-database from"
    )
    ap.add_argument("--pg-database", default="bench_commit_scale")
    ap.add_argument(
        "--pg-timeout", type=int, default=0, help="statement_timeout, seconds (0: none)"
    )
    ap.add_argument("--scratch", default=None, help="folder for shards and the SQLite catalog")
    ap.add_argument("--keep", action="store_true", help="keep the catalog (and --scratch)")
    ap.add_argument("--analyze", action="store_true", help="refresh statistics before the commit")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="commit the open job a --keep run left in --scratch / --pg-database (no build)",
    )
    ap.add_argument("--explain", action="store_true", help="print the plan of each SELECT")
    ap.add_argument("--top", type=int, default=12, help="statements to print, slowest first")
    ap.add_argument("--json", default=None, help="also write the figures here")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return run(parse(argv))


if __name__ == "__main__":
    main()
