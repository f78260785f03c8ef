"""A SQLite catalog file opened without SQLAlchemy: its URL, its settings, its lookups' connections.

Importing SQLAlchemy costs about 0.2 s, most of a ``shardcat get``. A
lookup runs SQL text on a driver connection and needs none of it: for a
plain ``sqlite:///path`` URL the path is read here, the schema check reads
the one stamped revision, and the lookups connect through :mod:`sqlite3`
with the very settings the catalog's engine gives its own connections
(:func:`configure`, which the engine calls too). The engine, and SQLAlchemy,
load when a unit of work first needs them. Any other URL (another driver,
query parameters, percent-escapes, ``file:`` URIs, an in-memory database)
is SQLAlchemy's to parse.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass, field

from .. import config
from .._units import size_or_zero
from ..errors import SettingError

__all__ = ["SqliteFile", "absolute", "configure", "file_path", "is_locked", "stamped_revision"]

_PREFIXES = ("sqlite:///", "sqlite+pysqlite:///")

# SQLite result codes (the primary code: the low byte of the extended one).
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6


def file_path(url: str) -> str | None:
    """The database file a plain SQLite file URL names (maybe relative), else None.

    None for everything SQLAlchemy must parse: other drivers, query strings,
    percent-escapes, ``file:`` URIs and in-memory databases.
    """
    for prefix in _PREFIXES:
        if url.startswith(prefix):
            path = url[len(prefix) :]
            if path in ("", ":memory:") or path.startswith("file:") or "?" in path or "%" in path:
                return None
            return path
    return None


def absolute(url: str) -> str | None:
    """``url`` with its relative file made absolute, as SQLAlchemy renders it; None if not plain."""
    path = file_path(url)
    if path is None:
        return None
    if os.path.isabs(path):
        return url
    return url[: len(url) - len(path)] + os.path.abspath(path)


def is_locked(e: BaseException) -> bool:
    """A SQLite error that means another connection holds the lock (SQLITE_BUSY, SQLITE_LOCKED)."""
    if not isinstance(e, sqlite3.Error):
        return False
    code = getattr(e, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    # Python 3.10's sqlite3 has no error codes: its messages are then all there is.
    return isinstance(e, sqlite3.OperationalError) and str(e).startswith(
        ("database is locked", "database table is locked", "database is busy")
    )


def _use_wal(cur: sqlite3.Cursor, busy_timeout: float) -> None:
    """Switch a file's journal to WAL (once per file; a no-op after), waiting out other openers.

    Two connections switching a new file at the same moment both hold a
    read lock and want the exclusive one: SQLite refuses one of them at once
    ("database is locked") without calling the busy handler, since waiting
    could deadlock. That one tries again, within the busy timeout; a file
    another process switched meanwhile is found in WAL already.
    """
    deadline = time.monotonic() + busy_timeout
    pause = 0.005
    while True:
        try:
            if cur.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cur.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if not is_locked(e) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


def configure(conn: sqlite3.Connection, busy_timeout: float, *, memory: bool = False) -> None:
    """Give a new connection the catalog's settings: every catalog connection, engine's or lookup's."""
    # Take transaction control from the sqlite3 module (it would not BEGIN before DDL).
    conn.isolation_level = None
    cur = conn.cursor()
    try:
        cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        if not memory:
            _use_wal(cur, busy_timeout)
        cur.execute("PRAGMA foreign_keys = ON")
        cur.execute("PRAGMA synchronous = NORMAL")
        # 64 MiB of page cache: bulk registration touches many index pages.
        cur.execute("PRAGMA cache_size = -65536")
        if not memory:
            # Pages read in place through a map, not copied into that cache: a point
            # lookup in 0.6-0.76 x the time (docs/SCALE.md §3).
            cur.execute(f"PRAGMA mmap_size = {mmap_size()}")
            # Checkpoint the WAL every ~64 MiB instead of every 4 MiB (bulk
            # registration: ~20 % faster here), and trim it back afterwards.
            cur.execute("PRAGMA wal_autocheckpoint = 16384")
            cur.execute("PRAGMA journal_size_limit = 67108864")
    finally:
        cur.close()


def mmap_size() -> int:
    """The ``sqlite_mmap_size`` setting (``SHARDCAT_SQLITE_MMAP_SIZE``) in bytes.

    Raises
    ------
    SettingError
        The value is not a size.
    """
    raw = config.get("sqlite_mmap_size")
    try:
        return size_or_zero(raw)
    except (TypeError, ValueError):
        raise SettingError(
            f"{config.env_var('sqlite_mmap_size')}={raw!r} is not a size: write e.g. 2GiB, "
            "or 0 to read SQLite catalogs without a memory map"
        ) from None


def stamped_revision(path: str, busy_timeout: float) -> str | None:
    """The schema revision stamped in the file at ``path``; None if it is missing, empty or unreadable.

    None sends the caller to SQLAlchemy and Alembic, which create, refuse or
    explain; a revision read here is only ever compared with the head.
    """
    if not os.path.isfile(path):
        return None
    try:
        conn = sqlite3.connect(path, timeout=busy_timeout)
    except sqlite3.Error:
        return None
    try:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return str(row[0][0]) if len(row) == 1 else None


@dataclass(frozen=True, slots=True)
class SqliteFile:
    """A catalog's SQLite file, for connections outside the engine's pool (the lookups')."""

    url: str = field(repr=False)
    path: str
    busy_timeout: float

    def connect(self) -> sqlite3.Connection:
        """A new connection with the catalog's settings, usable from any thread (closed by another)."""
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, check_same_thread=False)
        try:
            configure(conn, self.busy_timeout)
        except BaseException:
            conn.close()
            raise
        return conn
