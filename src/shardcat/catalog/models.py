"""The catalog's tables as typed SQLAlchemy 2 models.

docs/CATALOG.md describes every table and column, and why ``records`` looks
the way it does. The Alembic migrations in the top-level ``migrations/``
folder create exactly these tables; ``tests/catalog/test_migrations.py``
checks that models and migrations never drift apart.

Tables::

    datasets ──< jobs ──< shards ──< records >── layouts ──< layout_entries
        │                               └──< record_fields (shard_id, byte_offset)
        ├──< dataset_fields                (dataset_id on every table)
        ├──< dataset_versions      (one row per kept version)
        ├──< groups                (column groups: records.group_id, 0 = the base)
        └──< dataset_tags          (name -> version)
    api_tokens                     (``shardcat serve``'s access tokens, hashed)

``records`` has no foreign-key constraints on purpose: PostgreSQL checks
them row by row during COPY (three of them cut bulk registration by more
than half on our machines), and the catalog code is its only writer. It
deletes a shard's records before the shard itself.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
    true,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeEngine

from .hashkeys import KEY_MODES
from .keyrange import KEY_ORDER, SORTED_ROWS

__all__ = [
    "BASE_GROUP",
    "JOB_STATES",
    "KEY_MODES",
    "LIVE_STATES",
    "NAMING_CONVENTION",
    "SHARD_KINDS",
    "SHARD_STATES",
    "ApiToken",
    "Base",
    "Dataset",
    "DatasetField",
    "DatasetTag",
    "DatasetVersion",
    "Group",
    "Job",
    "Layout",
    "LayoutEntry",
    "Record",
    "RecordField",
    "Shard",
]

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
"""Deterministic constraint names, so migrations can refer to them on every backend."""

SHARD_STATES = ("staged", "committed", "deleted")
"""``staged`` → ``committed`` (job commit); ``staged`` → ``deleted`` (job abort);
``committed`` → ``deleted`` (shard removed). Only ``committed`` shards are visible."""

LIVE_STATES = ("staged", "committed")
"""States in which a shard row still names its file: gc never deletes such a file."""

JOB_STATES = ("open", "committed", "aborted")

SHARD_KINDS = ("native", "tar", "files", "mds", "litdata")
"""``native``: a shardcat shard file; ``tar``: a WebDataset tar indexed in place (revision 0004);
``files``: a group of samples of a plain folder indexed in place (revision 0010); ``mds`` and
``litdata``: an MDS shard or a LitData chunk indexed in place (revision 0011)."""

# JSONB on PostgreSQL (indexable, operators like ->> and @>), JSON elsewhere.
JSONType: TypeEngine[Any] = JSON().with_variant(JSONB(), "postgresql")
Timestamp = DateTime(timezone=True)


def _in(column: str, values: tuple[str, ...]) -> str:
    quoted = ", ".join(f"'{v}'" for v in values)
    return f"{column} IN ({quoted})"


class Base(DeclarativeBase):
    """Declarative base: naming conventions and shared type mappings."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JSONType, dt.datetime: Timestamp}  # noqa: RUF012


class Dataset(Base):
    """A named collection of shards whose keys are unique."""

    __tablename__ = "datasets"
    # Ids are never reused (SQLite would otherwise hand out a deleted maximum again).
    __table_args__ = {"sqlite_autoincrement": True}  # noqa: RUF012

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    root_url: Mapped[str] = mapped_column(Text)
    """Where the dataset's shards live, without credentials."""
    format_major: Mapped[int] = mapped_column(SmallInteger)
    format_minor: Mapped[int] = mapped_column(SmallInteger)
    version: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    """Bumped by every commit; the optimistic-concurrency token."""
    properties: Mapped[dict[str, Any]] = mapped_column(JSONType)
    created_at: Mapped[dt.datetime] = mapped_column(Timestamp, server_default=func.now())
    key_mode: Mapped[str] = mapped_column(String(8), server_default=text("'text'"))
    """``text``: records keep their key's text; ``hash``: only its hash (revision 0014,
    :mod:`shardcat.catalog.hashkeys`)."""


class Job(Base):
    """One unit of writing: its staged shards become visible together at commit."""

    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint(_in("state", JOB_STATES), name="state"),
        Index(None, "dataset_id", "state"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    state: Mapped[str] = mapped_column(String(16), server_default=text("'open'"))
    description: Mapped[str | None] = mapped_column(Text)
    properties: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    version: Mapped[int | None] = mapped_column(BigInteger)
    """The dataset version this job's commit produced."""
    base_version: Mapped[int | None] = mapped_column(BigInteger)
    """The dataset version when the job began: keys changed after it are conflicts."""
    created_at: Mapped[dt.datetime] = mapped_column(Timestamp, server_default=func.now())
    finished_at: Mapped[dt.datetime | None] = mapped_column(Timestamp)


class Shard(Base):
    """One shard file: what its header and footer say, and where it is in its life."""

    __tablename__ = "shards"
    __table_args__ = (
        CheckConstraint(_in("state", SHARD_STATES), name="state"),
        CheckConstraint(_in("kind", SHARD_KINDS), name="kind"),
        Index(None, "dataset_id", "state"),
        Index(None, "dataset_id", "url"),
        Index(None, "job_id"),
        # One live row per file and dataset: a URL another job staged or
        # committed can never be registered again (two rows, one file, two
        # truths). Deleted rows (tombstones) are outside the index.
        Index(
            "uq_shards_live_url",
            "dataset_id",
            "url",
            unique=True,
            sqlite_where=text(_in("state", LIVE_STATES)),
            postgresql_where=text(_in("state", LIVE_STATES)),
        ),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    url: Mapped[str] = mapped_column(Text)
    """Full URL (or local path) without credentials."""
    shard_number: Mapped[int | None] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(String(16))
    kind: Mapped[str] = mapped_column(String(16), server_default=text("'native'"))
    """``native``, ``tar`` or ``files`` (see :mod:`shardcat.catalog.kinds`)."""
    # --- from the header -------------------------------------------------
    file_id: Mapped[str] = mapped_column(String(32))
    format_major: Mapped[int] = mapped_column(SmallInteger)
    format_minor: Mapped[int] = mapped_column(SmallInteger)
    flags: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[dt.datetime] = mapped_column(Timestamp)
    """The writer's clock when it opened the shard (UTC)."""
    alignment: Mapped[int] = mapped_column(Integer)
    compression: Mapped[str] = mapped_column(String(16))
    header_crc: Mapped[int] = mapped_column(BigInteger)
    # --- from the footer -------------------------------------------------
    record_count: Mapped[int] = mapped_column(BigInteger)
    entry_count: Mapped[int] = mapped_column(BigInteger)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    payload_bytes: Mapped[int] = mapped_column(BigInteger)
    data_crc: Mapped[int] = mapped_column(BigInteger)
    footer_crc: Mapped[int] = mapped_column(BigInteger)
    user_metadata: Mapped[dict[str, Any]] = mapped_column(JSONType)
    # --- catalog life ----------------------------------------------------
    registered_at: Mapped[dt.datetime] = mapped_column(Timestamp, server_default=func.now())
    committed_at: Mapped[dt.datetime | None] = mapped_column(Timestamp)
    deleted_at: Mapped[dt.datetime | None] = mapped_column(Timestamp)
    # --- versions (docs/LIFECYCLE.md) --------------------------------------
    added_version: Mapped[int | None] = mapped_column(BigInteger)
    """The dataset version whose commit made the shard visible (NULL while staged)."""
    removed_version: Mapped[int | None] = mapped_column(BigInteger)
    """The version from which none of its records is live (NULL: some still are)."""


COMPACT = "compact"
"""The operation of a version ``shardcat.compact`` made: its copies replace records."""
FOLD = "fold"
"""A compaction that also folded column groups into the base records (docs/GROUPS.md)."""
REWRITES = (COMPACT, FOLD)
"""Operations whose versions copy records into new shards (their fields carried along)."""


class DatasetVersion(Base):
    """One committed change of a dataset: what ``shardcat log`` lists."""

    __tablename__ = "dataset_versions"
    __table_args__ = (PrimaryKeyConstraint("dataset_id", "number"),)

    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[dt.datetime] = mapped_column(Timestamp, server_default=func.now())
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    operation: Mapped[str] = mapped_column(String(32))
    records_added: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    records_removed: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    bytes_added: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    bytes_removed: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    message: Mapped[str | None] = mapped_column(Text)
    total_records: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    """Live records at this version (the previous total + added - removed)."""
    total_bytes: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    """Their bytes (record lengths, not file sizes)."""


class DatasetTag(Base):
    """A name for a version: tagged versions are never expired."""

    __tablename__ = "dataset_tags"
    __table_args__ = (PrimaryKeyConstraint("dataset_id", "name"),)

    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(255))
    version: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[dt.datetime] = mapped_column(Timestamp, server_default=func.now())


class Layout(Base):
    """A distinct sequence of entries (name, content type, codec) shared by many records."""

    __tablename__ = "layouts"
    __table_args__ = (UniqueConstraint("dataset_id", "digest"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    digest: Mapped[str] = mapped_column(String(64))
    """SHA-256 (hex) of ``signature``: a short unique key for any number of entries."""
    signature: Mapped[str] = mapped_column(Text)
    """JSON ``[[name, content_type, codec], ...]`` in record order."""
    entry_count: Mapped[int] = mapped_column(Integer)


class LayoutEntry(Base):
    """One entry of a layout: joins records to entry names for SQL filters."""

    __tablename__ = "layout_entries"
    __table_args__ = (PrimaryKeyConstraint("layout_id", "position"), Index(None, "name"))

    layout_id: Mapped[int] = mapped_column(ForeignKey("layouts.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(Text)
    content_type: Mapped[str] = mapped_column(Text)
    codec: Mapped[str] = mapped_column(String(16))


class Record(Base):
    """One sample: where its bytes are, and where each of its entries is inside them.

    Clustered by (shard, offset) on SQLite (``WITHOUT ROWID``), so a shard's
    records are stored together and deleted as one range.
    """

    __tablename__ = "records"
    __table_args__ = (
        PrimaryKeyConstraint("shard_id", "byte_offset"),
        Index(None, "dataset_id", "key_hash"),
        # Keys in order, for listings and prefix searches (`shardcat keys --prefix`), as a
        # range on the index. PostgreSQL: in byte order (COLLATE "C"), where a prefix is a
        # range whatever the database's collation; SQLite's default collation is bytes.
        # Partial: a hash-only dataset's rows (key NULL, migration 0014) and an unsorted one's
        # (key_sorted false, 0018) cost it no bytes.
        Index(
            None,
            "dataset_id",
            "key",
            postgresql_ops={"key": KEY_ORDER},
            sqlite_where=text(SORTED_ROWS),
            postgresql_where=text(SORTED_ROWS),
        ),
        # Removed records only (partial): what a version hides is a range of it, and
        # inserting live records costs it nothing (migration 0007).
        Index(
            None,
            "dataset_id",
            "removed_version",
            sqlite_where=text("removed_version IS NOT NULL"),
            postgresql_where=text("removed_version IS NOT NULL"),
        ),
        {"sqlite_with_rowid": False},
    )

    # Column order is storage order: PostgreSQL aligns 8-byte values to 8 and 4-byte ones to
    # 4, so the 8-byte columns come first, then the 4-byte ones, then the two of variable
    # length: no padding (8-16 bytes a row less than before revision 0016, docs/SCALE.md §3).
    byte_offset: Mapped[int] = mapped_column(BigInteger)
    """First byte of the record in its shard."""
    key_hash: Mapped[int] = mapped_column(BigInteger)
    """xxHash64 (seed 0) of the key's UTF-8 bytes, as a signed 64-bit integer."""
    byte_length: Mapped[int] = mapped_column(BigInteger)
    removed_version: Mapped[int | None] = mapped_column(BigInteger)
    """The version that removed it (replaced, deleted, skipped, overwritten); NULL: live."""
    shard_id: Mapped[int] = mapped_column(Integer)
    dataset_id: Mapped[int] = mapped_column(Integer)
    layout_id: Mapped[int] = mapped_column(Integer)
    group_id: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    """The column group it belongs to (``groups.id``); 0: the base (revision 0012, docs/GROUPS.md)."""
    key: Mapped[str | None] = mapped_column(Text)
    """The key's text; NULL in a hash-only dataset (``keys="hash"``), whose shards hold it."""
    spans: Mapped[bytes] = mapped_column(LargeBinary)
    """Per entry, in layout order: offset in the record, stored size, CRC32C (see spans.py)."""
    key_sorted: Mapped[bool] = mapped_column(Boolean, server_default=true())
    """Whether the key is in the key-order index: false in a dataset created with
    ``keys="unsorted"`` (revision 0018). Last: where ``ALTER TABLE ... ADD COLUMN`` puts it."""


BASE_GROUP = 0
"""``records.group_id`` of a dataset's base records: the default, and no ``groups`` row."""


class Group(Base):
    """A named set of entries added to a dataset's samples in shards of its own (docs/GROUPS.md)."""

    __tablename__ = "groups"
    __table_args__ = (
        # One live group per name and dataset; a dropped name may be added again.
        Index(
            "uq_groups_live_name",
            "dataset_id",
            "name",
            unique=True,
            sqlite_where=text("dropped_version IS NULL"),
            postgresql_where=text("dropped_version IS NULL"),
        ),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(255))
    added_version: Mapped[int] = mapped_column(BigInteger)
    """The version whose commit created it."""
    dropped_version: Mapped[int | None] = mapped_column(BigInteger)
    """The version that dropped it (its records removed there); NULL: live."""


FIELD_KINDS = ("number", "text")
"""How a declared field's values are stored: ``record_fields.num`` or ``record_fields.text``."""


class DatasetField(Base):
    """A scalar per-sample field declared for a dataset, queryable as a column by ``where=``."""

    __tablename__ = "dataset_fields"
    __table_args__ = (
        PrimaryKeyConstraint("dataset_id", "name"),
        CheckConstraint(_in("kind", FIELD_KINDS), name="kind"),
    )

    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))
    """``number`` (ints, floats, booleans) or ``text``."""


class RecordField(Base):
    """One declared field's value for one record, from one version on (keyed like ``records``).

    No foreign keys. Versioned like records (:func:`.visibility.value_visible_at`):
    ``update_fields`` supersedes a value at a new version instead of overwriting it.
    """

    __tablename__ = "record_fields"
    __table_args__ = (
        PrimaryKeyConstraint("shard_id", "byte_offset", "name", "added_version"),
        Index(None, "dataset_id", "name", "num"),
        Index(None, "dataset_id", "name", "text"),
        {"sqlite_with_rowid": False},
    )

    shard_id: Mapped[int] = mapped_column(Integer)
    byte_offset: Mapped[int] = mapped_column(BigInteger)
    name: Mapped[str] = mapped_column(String(64))
    dataset_id: Mapped[int] = mapped_column(Integer)
    # Before ``text``, which names the column in this class's body from there on.
    added_version: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    """The version that set the value (``update_fields``); 0: stored with the record (revision 0015)."""
    removed_version: Mapped[int | None] = mapped_column(BigInteger)
    """The version that superseded it (another value, or none); NULL: the latest value."""
    num: Mapped[float | None] = mapped_column(Double)
    text: Mapped[str | None] = mapped_column(Text)


class ApiToken(Base):
    """An access token of ``shardcat serve``: only its SHA-256 is kept (revision 0009).

    The token itself is printed once when it is made; a request's token is
    hashed and looked up here. ``datasets`` scopes it (NULL: every dataset of
    this catalog).
    """

    __tablename__ = "api_tokens"
    __table_args__ = {"sqlite_autoincrement": True}  # noqa: RUF012

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    """SHA-256 (hex) of the token."""
    datasets: Mapped[list[str] | None] = mapped_column(JSONType)
    """JSON list of the dataset names it may read; NULL: every dataset."""
    created_at: Mapped[dt.datetime] = mapped_column(Timestamp, server_default=func.now())
    expires_at: Mapped[dt.datetime | None] = mapped_column(Timestamp)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(Timestamp)
