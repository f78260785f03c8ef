"""Catalog test helpers: shard factories, and counters of SQL statements and storage reads.

The counters sit at the lowest level that still names each request:

* ``QueryCounter`` hooks the DBAPI connections themselves (``sqlite3``'s
  trace callback, a counting psycopg cursor class), on the lookup's raw
  connection and on every connection the engine's pool hands out, so a
  statement cannot slip past it whichever layer sends it;
* ``ReadCounter`` wraps ``os.pread`` (local files), ``MemoryFileSystem.cat_file``
  and ``S3FileSystem._call_s3`` (one HTTP request each).
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import uuid
from typing import Any

import pytest
from hypothesis.stateful import RuleBasedStateMachine
from sqlalchemy import event

import shardcat
from shardcat.reading import Catalog, point

KEYS_PER_SHARD = 40


def sample(key: str) -> dict[str, Any]:
    """A sample whose bytes depend on the key (sizes vary from 16 B to ~3 KiB)."""
    n = 16 + (sum(key.encode()) * 37) % 3000
    return {
        "jpg": (key.encode() * (n // max(1, len(key)) + 1))[:n],
        "json": {"key": key},
        "txt": f"text of {key}",
    }


def write_shard(
    url: str,
    keys: list[str],
    *,
    storage_options: dict[str, Any] | None = None,
    shard_number: int | None = None,
    metadata: dict[str, Any] | None = None,
    make: Any = sample,
) -> shardcat.ShardInfo:
    kwargs: dict[str, Any] = {}
    if shard_number is not None:
        kwargs["shard_number"] = shard_number
    if metadata is not None:
        kwargs["metadata"] = metadata
    with shardcat.ShardWriter(url, storage_options=storage_options, **kwargs) as w:
        for k in keys:
            w.add(k, make(k))
    return w.close()


def shard_keys(i: int, n: int = KEYS_PER_SHARD) -> list[str]:
    return [f"img/{i:03d}/{j:05d}" for j in range(n)]


def make_dataset(
    cat: Catalog, root: str, shards: int = 2, *, storage_options: Any = None, name: str = "train"
) -> list[shardcat.ShardInfo]:
    if storage_options is not None:  # each commit writes its manifest beside the shards
        cat.storage_options = storage_options
    cat.create_dataset(name, root)
    infos = []
    for i in range(shards):
        info = write_shard(
            f"{root}/train-{i:06d}.shard",
            shard_keys(i),
            storage_options=storage_options,
            shard_number=i,
        )
        cat.register_shard(name, info)
        infos.append(info)
    return infos


needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")


def fill_with_history(cat: Catalog, root: str) -> int:
    """A catalog with something of everything a schema change must keep; returns a kept version.

    Dataset ``train`` (two shards) with two declared fields and values, one key
    deleted after the returned version, a column group ``captions`` over three
    keys; dataset ``h`` hash-only, one shard of ``shard_keys(7)``.
    """
    from shardcat.catalog.groups import GroupWrite

    make_dataset(cat, root, 2)
    cat.declare_fields("train", {"label": int, "split": str})
    cat.update_fields("train", {k: {"label": i % 3} for i, k in enumerate(shard_keys(0))})
    cat.update_fields("train", {shard_keys(0)[0]: {"split": "val"}})
    kept = cat.info("train").version
    cat.delete_keys("train", [shard_keys(1)[5]])
    job = cat.begin_job("train")
    info = write_shard(f"{root}/g.shard", shard_keys(0)[:3], make=lambda k: {"g": k})
    cat.register_shard("train", info, job=job)
    cat.commit_job(job, group=GroupWrite("captions"))
    cat.create_dataset("h", f"{root}/h", keys="hash")
    cat.register_shard("h", write_shard(f"{root}/h/a.shard", shard_keys(7)))
    return kept


def descriptors_of(path: str | os.PathLike[str]) -> list[int]:
    """This process's open descriptors that name ``path`` (Linux: /proc/self/fd)."""
    target = os.path.realpath(path)
    out = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == target:
                out.append(int(name))
        except OSError:  # the descriptor listdir itself used, closed since
            continue
    return out


# --- counting SQL statements -----------------------------------------------


class _CountingRows:
    """The compiled lookup, its ``rows()`` and ``get()`` calls that ran a statement counted."""

    def __init__(
        self, inner: Any, sql: str, point_sql: str, statements: list[str], lookup: Any
    ) -> None:
        self.inner, self.sql, self.point_sql, self.statements = inner, sql, point_sql, statements
        # A hash-only dataset's get() steps the hash-only statement instead, and its
        # batch the statement whose rows end with their key hash.
        self.hash_sql, self.hash_datasets = lookup._record_by_shard_hash, lookup.hash_datasets
        self.hash_batch_sql = lookup._sql("batch_hashed", None)[0]

    def rows(self, dataset: str, hashes: list[int], hashed: bool = False) -> Any:
        rows = self.inner.rows(dataset, hashes, hashed)
        if rows is not None:
            self.statements.append(self.hash_batch_sql if hashed else self.sql)
        return rows

    def get(self, dataset: str, key: str, decode: Any) -> Any:
        record = self.inner.get(dataset, key, decode)
        if record is not None:  # it stepped its point statement (a None may not have)
            hashed = dataset in self.hash_datasets
            self.statements.append(self.hash_sql if hashed else self.point_sql)
        return record

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class QueryCounter:
    """Every SQL statement sent while active, counted at the DBAPI connection."""

    def __init__(self, cat: Catalog) -> None:
        self.cat = cat
        self.statements: list[str] = []
        self._hooked: list[Any] = []

    def _hook(self, dbapi_conn: Any) -> None:
        if any(c is dbapi_conn for c in self._hooked):
            return
        if isinstance(dbapi_conn, sqlite3.Connection):
            dbapi_conn.set_trace_callback(self.statements.append)
        else:
            import psycopg

            statements = self.statements

            class Counting(psycopg.Cursor):  # type: ignore[type-arg]
                def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
                    statements.append(str(query))
                    return super().execute(query, params, **kw)

                def executemany(self, query: Any, params_seq: Any, **kw: Any) -> Any:
                    statements.append(str(query))
                    return super().executemany(query, params_seq, **kw)

                def copy(self, statement: Any, *args: Any, **kw: Any) -> Any:
                    statements.append(str(statement))
                    return super().copy(statement, *args, **kw)

            dbapi_conn.cursor_factory = Counting
        self._hooked.append(dbapi_conn)

    def _on_checkout(self, dbapi_conn: Any, record: Any, proxy: Any) -> None:
        self._hook(dbapi_conn)

    def __enter__(self) -> QueryCounter:
        lookup = self.cat._lookup()
        self._hook(lookup.raw.conn)
        # A statement stepped on the compiled lookup's own connection
        # (_cpoint.c get() and rows()) is sent too, though not through the
        # DBAPI one. (The Python twin steps them on the DBAPI connection.)
        self._compiled = lookup, lookup._point_lookup, lookup.fast_get
        if point.is_compiled(lookup._point_lookup):
            counting = _CountingRows(
                lookup._point_lookup,
                lookup._batch,
                lookup._record_by_shard,
                self.statements,
                lookup,
            )
            lookup._point_lookup = counting
            lookup.fast_get = counting.get
        event.listen(self.cat.engine, "checkout", self._on_checkout)
        return self

    def __exit__(self, *exc: Any) -> None:
        event.remove(self.cat.engine, "checkout", self._on_checkout)
        lookup, compiled, lookup.fast_get = self._compiled
        lookup._point_lookup = compiled
        for conn in self._hooked:
            if isinstance(conn, sqlite3.Connection):
                conn.set_trace_callback(None)
            else:
                import psycopg

                conn.cursor_factory = psycopg.Cursor
        self._hooked.clear()

    @property
    def count(self) -> int:
        return len(self.statements)


# --- counting storage reads ------------------------------------------------


class PointReadCounter:
    """The point lookup's reads (compiled or twin): the shard URL of each, in order.

    The compiled point lookup reads in C (``pread``), which no Python wrapper
    sees; it marks each shard it read in the lookup's source cache (``touch``,
    once per read), as the twin does. Counted from lookups opened while this
    is active (construct it before the catalog's first read in the thread).
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from shardcat.storage.cache import SourceCache

        self.reads: list[str] = []
        reads = self.reads
        real_init = SourceCache.__init__

        def init(cache: Any, *args: Any, **kw: Any) -> None:
            real_init(cache, *args, **kw)
            real_touch = cache.touch

            def touch(url: str) -> None:
                reads.append(url)
                real_touch(url)

            cache.touch = touch

        monkeypatch.setattr(SourceCache, "__init__", init)


class ReadCounter:
    """Every read request to a shard store: ``(kind, start, end)``; other S3 requests by name."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads: list[tuple[str, int | None, int | None]] = []
        self.other_requests: list[str] = []
        reads = self.reads
        real_pread = os.pread

        def pread(fd: int, n: int, offset: int) -> bytes:
            reads.append(("pread", offset, offset + n))
            return real_pread(fd, n, offset)

        monkeypatch.setattr(os, "pread", pread)

        # The point lookup reads a cached descriptor with the compiled
        # pread_linked (fstat + pread in C), which os.pread does not see.
        from shardcat.format import sources

        real_linked = sources.pread_linked
        if real_linked is not sources._pread_linked:  # the reference calls os.pread itself

            def linked(fd: int, n: int, offset: int) -> bytes | None:
                reads.append(("pread", offset, offset + n))
                return real_linked(fd, n, offset)

            monkeypatch.setattr(sources, "pread_linked", linked)

        # The local batch path reads with the compiled read_packed (preadv in C):
        # its reads are the runs of _pread.packed_runs (the reference preads each).
        from shardcat import _pread
        from shardcat.format import recordcodec

        real_packed = recordcodec.read_packed
        if real_packed is not _pread.read_packed:

            def packed(fds: Any, table: Any, max_gap: int, group_bytes: int, *pool: Any) -> Any:
                for _, start, end, _, _ in _pread.packed_runs(table, max_gap):
                    reads.append(("pread", start, end))
                return real_packed(fds, table, max_gap, group_bytes, *pool)

            monkeypatch.setattr(recordcodec, "read_packed", packed)

        from fsspec.implementations.memory import MemoryFileSystem

        real_cat = MemoryFileSystem.cat_file

        def cat_file(
            self: Any, path: str, start: int | None = None, end: int | None = None, **kw: Any
        ) -> Any:
            reads.append(("memory", start, end))
            return real_cat(self, path, start=start, end=end, **kw)

        monkeypatch.setattr(MemoryFileSystem, "cat_file", cat_file)
        self._count_obstore(monkeypatch)
        try:
            import s3fs
        except ImportError:  # pragma: no cover - s3fs is a test dependency
            return
        real_call = s3fs.S3FileSystem._call_s3
        others = self.other_requests

        async def call_s3(self: Any, method: str, *args: Any, **kw: Any) -> Any:
            # One HTTP request each; the sync API's methods are bound per instance,
            # so this private coroutine is the one place every request passes.
            if method == "get_object" and "Range" in kw:
                first, last = kw["Range"].split("=", 1)[1].split("-")
                reads.append(("s3", int(first), int(last) + 1))
            elif method == "get_object":
                reads.append(("s3", None, None))
            else:
                others.append(method)
            return await real_call(self, method, *args, **kw)

        monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", call_s3)

    def _count_obstore(self, monkeypatch: pytest.MonkeyPatch) -> None:
        # s3:// reads through obstore (SHARDCAT_S3_TRANSPORT=auto, the default,
        # with the moto fixtures' options): one request per range, as
        # storage/objstore.py sends them (get_ranges with coalesce=0).
        try:
            import obstore
        except ImportError:  # pragma: no cover - obstore comes with the s3 extra
            return
        reads, others = self.reads, self.other_requests
        real_range, real_ranges = obstore.get_range, obstore.get_ranges
        real_get, real_head = obstore.get, obstore.head

        def get_range(store: Any, path: str, *, start: int, end: int, **kw: Any) -> Any:
            reads.append(("s3", start, end))
            return real_range(store, path, start=start, end=end, **kw)

        def get_ranges(store: Any, path: str, *, starts: Any, ends: Any, **kw: Any) -> Any:
            reads.extend(("s3", a, b) for a, b in zip(starts, ends))
            return real_ranges(store, path, starts=starts, ends=ends, **kw)

        def get(store: Any, path: str, *args: Any, **kw: Any) -> Any:
            reads.append(("s3", None, None))
            return real_get(store, path, *args, **kw)

        def head(store: Any, path: str, *args: Any, **kw: Any) -> Any:
            others.append("head_object")
            return real_head(store, path, *args, **kw)

        real_range_async = obstore.get_range_async

        async def get_range_async(store: Any, path: str, *, start: int, end: int, **kw: Any) -> Any:
            # A batch's ranges across files (storage/fanout.py): one request each.
            reads.append(("s3", start, end))
            return await real_range_async(store, path, start=start, end=end, **kw)

        for name, fn in (("get_range", get_range), ("get_ranges", get_ranges)):
            monkeypatch.setattr(obstore, name, fn)
        monkeypatch.setattr(obstore, "get_range_async", get_range_async)
        monkeypatch.setattr(obstore, "get", get)
        monkeypatch.setattr(obstore, "head", head)

    @property
    def count(self) -> int:
        return len(self.reads)

    @property
    def nbytes(self) -> int:
        return sum((e or 0) - (s or 0) for _, s, e in self.reads)

    def clear(self) -> None:
        self.reads.clear()
        self.other_requests.clear()


# --- hypothesis state machines on SQLite and PostgreSQL --------------------


def machine_settings(env: str, examples: int, steps: int, *, postgres: bool = False) -> Any:
    """The settings of a catalog state machine: ``$env`` examples (else ``examples``), no deadline.

    The PostgreSQL case runs under a function-scoped fixture (its URL), which
    hypothesis is told is fine: the machine makes its own catalog per example.
    """
    from hypothesis import HealthCheck, settings

    checks = [HealthCheck.too_slow]
    if postgres:
        checks.append(HealthCheck.function_scoped_fixture)
    return settings(
        max_examples=int(os.environ.get(env, str(examples))),
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=checks,
    )


def machine_cases(
    machine: Any, sqlite: tuple[int, int], postgres: tuple[int, int]
) -> tuple[Any, Any, Any]:
    """A catalog state machine's test case on SQLite, the fixture that gives its PostgreSQL
    twin the test server's URL, and that twin: a test module binds all three to its names.

    ``sqlite`` and ``postgres``: (examples, steps) of each (:func:`machine_settings`).
    """
    machine.TestCase.settings = machine_settings("SHARDCAT_MODEL_EXAMPLES", *sqlite)
    twin = type(f"{machine.__name__}Postgres", (machine,), {})
    name = f"_pg_{machine.__name__}"

    @pytest.fixture(name=name)
    def url(postgres_url: str) -> Any:
        twin.url = postgres_url
        yield
        twin.url = ""

    case = type(
        f"Test{machine.__name__}Postgres",
        (twin.TestCase,),
        {"settings": machine_settings("SHARDCAT_MODEL_EXAMPLES_PG", *postgres, postgres=True)},
    )
    return machine.TestCase, url, pytest.mark.usefixtures(name)(case)


class CatalogMachine(RuleBasedStateMachine):
    """A catalog state machine's per-example dataset, and its teardown.

    ``url``: the catalog (empty: a fresh SQLite file per example; set by the
    PostgreSQL twin of :func:`machine_cases`). Each example's dataset gets a
    name of its own, since the PostgreSQL twin shares one schema across examples.
    """

    url: str = ""

    def open_dataset(self, prefix: str) -> None:
        """``self.cat``, ``self.name`` and ``self.root`` (the dataset's folder) of a new example."""
        self.tmp = tempfile.TemporaryDirectory()
        self.root = os.path.join(self.tmp.name, "ds")
        os.mkdir(self.root)
        self.cat = Catalog(self.url or f"sqlite:///{self.tmp.name}/catalog.db")
        self.name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.cat.create_dataset(self.name, self.root)

    def teardown(self) -> None:
        if hasattr(self, "cat"):
            self.cat.close()
            self.tmp.cleanup()


def flip_byte(path: str, offset: int, mask: int = 0x40) -> None:
    """Change one byte of a file in place (XOR with ``mask``): a damaged shard."""
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ mask]))


def keyed_dataset(cat: Catalog, root: str, name: str, keys: str, shards: int = 2) -> list[Any]:
    """A dataset created with ``keys=`` (a key mode), ``shards`` shards of ``shard_keys(i)``."""
    cat.create_dataset(name, root, keys=keys)
    infos = []
    for i in range(shards):
        info = write_shard(f"{root}/{name}-{i:06d}.shard", shard_keys(i), shard_number=i)
        cat.register_shard(name, info)
        infos.append(info)
    return infos
