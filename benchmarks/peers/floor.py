"""The floor: what the hardware and the chosen backends allow, with no format at all.

The same bytes (payload then label, back to back) in 64 MiB files, their
locations in a SQLite table keyed by the sample key (``key TEXT PRIMARY KEY``,
``WITHOUT ROWID``), read back with the raw ``sqlite3`` module and
``os.pread`` on an open file descriptor (local) or one ranged GET,
``fs.cat_file(path, start=, end=)`` (S3). A batch is one query plus reads
sorted by file and offset (local: ``os.pread`` each; S3: one ``fs.cat_ranges``).
Streaming is a raw sequential read of every file in 8 MiB chunks. No CRCs, no
framing: a lower bound, not a usable format.

Its write time includes that narrow table's ``executemany``. Its
*registration* figure is not that insert but the issue's definition, "a
bare bulk insert into the same indexed table": right after the timed write
(untimed), the same keys go into a table created with the DDL of shardcat's
own ``records`` table and its indexes (read from ``sqlite_master`` of a
fresh shardcat catalog), one raw ``sqlite3`` ``executemany`` in one
transaction, with the connection settings of shardcat's catalog (WAL,
``synchronous = NORMAL``, 64 MiB of page cache, checkpoints every 64 MiB;
with SQLite's 2 MiB default cache the same insert is ~1.45 x slower). The
rows hold what shardcat stores: the key's xxh64 as a signed integer, the
record's offset and length, a layout id and the packed spans of its two
entries (24 bytes), computed before the clock starts. The narrow table's
rate is kept as a note.
"""

from __future__ import annotations

import json
import os
import sqlite3
import struct
import tempfile
import time
import zlib
from collections.abc import Iterator
from typing import Any

from benchmarks.peers.base import SHARD_BYTES, Pair, System

CHUNK = 8 << 20


class Floor(System):
    name = "floor"

    def write(self) -> None:
        fs = self.store.fs()
        if self.store.kind == "local":
            os.makedirs(self.root, exist_ok=True)
        self.files: list[str] = []
        rows: list[tuple[str, int, int, int, int]] = []
        buf = bytearray()

        def flush() -> None:
            path = f"{self.root}/part-{len(self.files):06d}.bin"
            with fs.open(path, "wb") as f:
                f.write(buf)
            self.files.append(path)
            buf.clear()

        for s in self.dataset:
            if len(buf) + len(s.payload) + len(s.label) > SHARD_BYTES and buf:
                flush()
            rows.append((s.key, len(self.files), len(buf), len(s.payload), len(s.label)))
            buf += s.payload
            buf += s.label
        if buf:
            flush()
        # Its lookup index: one executemany in one transaction (part of the write time).
        self.db = os.path.join(self.store.local_dir(self.name), "index.db")
        conn = sqlite3.connect(self.db)
        conn.execute(
            "CREATE TABLE samples (key TEXT PRIMARY KEY, file INTEGER, offset INTEGER,"
            " plen INTEGER, llen INTEGER) WITHOUT ROWID"
        )
        t = time.perf_counter()
        with conn:
            conn.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?)", rows)
        self.narrow_seconds = time.perf_counter() - t
        conn.close()
        self._rows = rows

    def after_write(self) -> None:
        """The registration floor: a bare executemany into a copy of shardcat's ``records``."""
        import xxhash

        import shardcat

        rows = self._rows
        self.notes.append(
            f"narrow-table insert (key TEXT PRIMARY KEY, WITHOUT ROWID; part of its write time):"
            f" {len(rows) / self.narrow_seconds:,.0f} keys/s"
        )
        with tempfile.TemporaryDirectory(prefix="floor-schema-") as tmp:
            shardcat.Catalog(f"sqlite:///{tmp}/schema.db").close()
            src = sqlite3.connect(f"{tmp}/schema.db")
            ddl = [
                r[0]
                for r in src.execute(
                    "SELECT sql FROM sqlite_master WHERE tbl_name = 'records'"
                    " AND sql IS NOT NULL ORDER BY type DESC"  # the table, then its indexes
                )
            ]
            src.close()
        path = os.path.join(self.store.local_dir(self.name), "records.db")
        conn = sqlite3.connect(path, isolation_level=None)
        # The connection settings of shardcat's catalog (catalog/session.py): the ratio then
        # measures what registration adds to the insert, not a tuning difference.
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA cache_size = -65536")
        conn.execute("PRAGMA wal_autocheckpoint = 16384")
        for stmt in ddl:
            conn.execute(stmt)
        pack = struct.Struct("<6I").pack
        records = []
        for key, file, offset, plen, llen in rows:
            raw = key.encode("utf-8")
            h = xxhash.xxh64_intdigest(raw)
            signed = h - (1 << 64) if h >= 1 << 63 else h
            spans = pack(0, plen, zlib.crc32(raw), plen, llen, 0)  # two entries, narrow
            records.append((file, 1, offset, signed, key, plen + llen, 1, spans))
        t, cpu = time.perf_counter(), time.process_time()
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO records (shard_id, dataset_id, byte_offset, key_hash, key,"
            " byte_length, layout_id, spans) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            records,
        )
        conn.execute("COMMIT")
        self.registration_seconds = time.perf_counter() - t
        self.registration_cpu_seconds = time.process_time() - cpu
        conn.close()
        self.notes.append(
            "registration floor: one sqlite3 executemany into a copy of shardcat's records"
            " table and its indexes"
        )

    def open(self) -> None:
        self.conn = sqlite3.connect(self.db, isolation_level=None, check_same_thread=False)
        self.fds: dict[int, int] = {}
        self.fs: Any = self.store.fs()
        # Where each file's samples are, for the streaming read: known up front, like a format's index.
        self.layout = self.conn.execute(
            "SELECT key, file, offset, plen, llen FROM samples ORDER BY file, offset"
        ).fetchall()
        self.notes.append(
            "raw sqlite3 primary-key query + "
            + (
                "os.pread on an open fd"
                if self.store.kind == "local"
                else "one ranged GET (s3fs cat_file)"
            )
        )

    def _fd(self, file: int) -> int:
        fd = self.fds.get(file)
        if fd is None:
            fd = self.fds[file] = os.open(self.files[file], os.O_RDONLY)
        return fd

    def _split(self, buf: bytes, plen: int) -> Pair:
        view = memoryview(buf)
        return view[:plen], view[plen:]

    def locate(self, key: str) -> tuple[int, int, int, int]:
        """The record's file, offset, payload and label lengths: one primary-key query."""
        row: tuple[int, int, int, int] = self.conn.execute(
            "SELECT file, offset, plen, llen FROM samples WHERE key = ?", (key,)
        ).fetchone()
        return row

    def read(self, file: int, offset: int, plen: int, llen: int) -> Pair:
        """The record's bytes alone: one ``os.pread`` (local) or one ranged GET (S3).

        The runner also times this apart from ``locate`` on S3 (issue 36's
        "one ranged GET of the record", the bound of a point lookup there).
        """
        if self.store.kind == "local":
            buf = os.pread(self._fd(file), plen + llen, offset)
        else:
            buf = self.fs.cat_file(self.files[file], start=offset, end=offset + plen + llen)
        return self._split(buf, plen)

    def get(self, key: str) -> Pair:
        return self.read(*self.locate(key))

    def get_many(self, keys: list[str]) -> list[Pair]:
        rows = self.conn.execute(
            "SELECT key, file, offset, plen, llen FROM samples"
            " WHERE key IN (SELECT value FROM json_each(?)) ORDER BY file, offset",
            (json.dumps(keys),),
        ).fetchall()
        found: dict[str, Pair] = {}
        if self.store.kind == "local":
            for key, file, offset, plen, llen in rows:
                found[key] = self._split(os.pread(self._fd(file), plen + llen, offset), plen)
        else:
            blobs = self.fs.cat_ranges(
                [self.files[r[1]] for r in rows],
                [r[2] for r in rows],
                [r[2] + r[3] + r[4] for r in rows],
            )
            for (key, _, _, plen, _), buf in zip(rows, blobs):
                found[key] = self._split(buf, plen)
        return [found[k] for k in keys]

    def stream(self) -> Iterator[tuple[str, bytes | memoryview, bytes | memoryview]]:
        """Raw sequential reads; yields each file's samples sliced from the bytes read."""
        layout = self.layout
        at = 0
        for file, path in enumerate(self.files):
            with self.fs.open(path, "rb", block_size=CHUNK) as f:
                chunks = []
                while chunk := f.read(CHUNK):
                    chunks.append(chunk)
            view = memoryview(b"".join(chunks))
            while at < len(layout) and layout[at][1] == file:
                key, _, offset, plen, llen = layout[at]
                yield key, view[offset : offset + plen], view[offset + plen : offset + plen + llen]
                at += 1

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.conn.close()
