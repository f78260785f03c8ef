"""The one exception tree of shardcat.

Every error a user can meet derives from :class:`ShardcatError`; where a
builtin exception already means the same thing, it is mixed in, so
``except FileNotFoundError`` or ``except KeyError`` keep working. Messages say
what happened, where (file, byte offset, key) and what to do about it.

What to do depends on who asked: a Python caller passes ``mode="append"``, a
command-line user types ``--mode append``. An error whose advice differs
carries a :class:`Hint` with both; ``str(error)`` gives the Python one (the
library's own interface) and :meth:`ShardcatError.render` either, which is
how the CLI prints errors.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal

__all__ = [
    "AccessDeniedError",
    "BadRequestError",
    "BatchSenderGoneError",
    "BucketNotFoundError",
    "CatalogClosedError",
    "CatalogError",
    "CatalogLockedError",
    "CatalogUnreachableError",
    "ChecksumError",
    "CodecUnavailableError",
    "CommitConflictError",
    "DatasetExistsError",
    "DatasetNotFoundError",
    "DatasetRootError",
    "DecompressionLimitError",
    "DestinationNotEmptyError",
    "DuplicateKeyError",
    "EmptySourceError",
    "EntryExistsError",
    "EntryNotFoundError",
    "ExportNameError",
    "ExtraNotInstalledError",
    "FormatError",
    "GroupNotFoundError",
    "GroupsUnsupportedError",
    "Hint",
    "HistoryWarning",
    "InvalidKeyError",
    "InvalidNameError",
    "JobExistsError",
    "JobInputsChangedError",
    "JobInterrupted",
    "JobNotFoundError",
    "KeyConflictError",
    "KeyNotFoundError",
    "KeyOrderUnavailableError",
    "KeyTextUnavailableError",
    "NewerVersionWarning",
    "ObjectExistsError",
    "ProgressCallbackError",
    "QueryError",
    "QueryLimitError",
    "QueryRefusedError",
    "QueryTimeoutError",
    "RateLimitedError",
    "RecordTooLargeError",
    "RecordsRebuildError",
    "RequestTooLargeError",
    "SampleDecodeError",
    "SchedulerUnreachableError",
    "SchemaVersionError",
    "SettingError",
    "ShardNotFoundError",
    "ShardcatError",
    "SourceIsShardsError",
    "StorageCredentialsError",
    "StorageError",
    "StorageFullError",
    "StoragePermissionError",
    "StorageUnreachableError",
    "TokenNotFoundError",
    "TruncatedError",
    "UnknownKeysError",
    "UnmatchedFilesError",
    "VersionError",
    "VersionNotFoundError",
    "WorkersHeldError",
    "WorkersLostError",
    "WriterClosedError",
]


Interface = Literal["python", "cli"]


@dataclasses.dataclass(frozen=True, slots=True)
class Hint:
    """What to do about an error, in the terms of each interface.

    Attributes
    ----------
    python:
        Advice for a Python caller (``mode='append'``, ``Catalog.create_dataset``).
    cli:
        The same advice for a ``shardcat`` command-line user (``--mode append``).
    """

    python: str
    cli: str


class ShardcatError(Exception):
    """Root of every error raised by shardcat.

    Parameters
    ----------
    *args:
        The message (what happened, and where).
    hint:
        What to do about it, per interface; appended after ``"; "``.
    """

    hint: Hint | None = None

    def __init__(self, *args: object, hint: Hint | None = None) -> None:
        super().__init__(*args)
        self.hint = hint

    @property
    def message(self) -> str:
        """What happened, without the hint."""
        # One argument as written: KeyError would quote it, OSError is fine either way.
        return str(self.args[0]) if len(self.args) == 1 else Exception.__str__(self)

    def render(self, interface: Interface = "python") -> str:
        """The message followed by the hint for ``interface``."""
        if self.hint is None:
            return self.message
        return f"{self.message}; {getattr(self.hint, interface)}"

    def __str__(self) -> str:
        return self.render("python")


# --- the shard file -------------------------------------------------------


class FormatError(ShardcatError, ValueError):
    """A file is not a valid shard, or a part of it is inconsistent.

    Attributes
    ----------
    path:
        The file (URL or path) the problem was found in, if known.
    offset:
        Byte offset of the problem inside that file, if known.
    """

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None) -> None:
        self.path = path
        self.offset = offset
        if path and offset is not None:
            where = f"{path} at offset {offset}: "
        elif path:
            where = f"{path}: "
        elif offset is not None:
            where = f"at offset {offset}: "
        else:
            where = ""
        super().__init__(where + message)
        self.detail = message


class ChecksumError(FormatError):
    """Stored and computed CRC32C disagree: the bytes changed after writing."""


class TruncatedError(FormatError):
    """The file ends before a structure it promises (an interrupted write or copy)."""


class DecompressionLimitError(FormatError):
    """An entry declares a decompressed size above the limit this process allows.

    The limit (1 GiB by default) guards against decompression bombs; raise it
    with the ``SHARDCAT_MAX_DECOMPRESSED_BYTES`` environment variable to read
    a trusted shard with larger entries.
    """


class SampleDecodeError(FormatError):
    """An entry's bytes are not what its content type says: a JSON entry that is not JSON,
    text that is not in its charset, a ``.npy`` entry that is not an array.

    The shard itself is sound (its checksums held): one sample was written
    bad. A :class:`FormatError` and so a :class:`ValueError`. The message
    names what is known of where the sample is; readers fill in what the
    entry alone does not know (the dataset, the shard) before it reaches you.

    Attributes
    ----------
    dataset, key, entry, path:
        The dataset, the record's key, the entry's name and the shard's URL
        (never with credentials), each None where unknown.
    writing:
        Raised by a write, before the sample was stored (its advice differs).
    source:
        The file the entry was read from (packing files), if known.
    content_type:
        The entry's declared content type.
    reason:
        What is wrong with the bytes (the decoder's own message).
    """

    SKIP = Hint(
        python="write that sample again with valid bytes (mode='append', "
        "on_duplicate='replace'), or read with on_error='skip' (or 'log') to drop bad samples",
        cli="write that sample again with valid bytes (--mode append --on-duplicate replace), "
        "or read with on_error='skip' (or 'log') to drop bad samples",
    )
    """The hint of a sample read back: rewrite it, or let readers drop such samples."""
    FIX_SOURCE = Hint(
        python="fix or remove that entry (or the whole sample) and write again; "
        "nothing of this job was committed",
        cli="fix or remove that file (or its whole sample) and run the write again; "
        "nothing of this job was committed",
    )
    """The hint of a sample refused at write time."""

    def __init__(
        self,
        reason: str,
        *,
        content_type: str = "",
        dataset: str | None = None,
        key: str | None = None,
        entry: str | None = None,
        path: str | None = None,
        offset: int | None = None,
        writing: bool = False,
        source: str | None = None,
    ) -> None:
        super().__init__(reason, path=path, offset=offset)
        self.hint = self.FIX_SOURCE if writing else self.SKIP
        self.writing = writing
        self.source = source
        self.reason = reason
        self.content_type = content_type
        self.dataset = dataset
        self.key = key
        self.entry = entry

    def locate(
        self,
        *,
        dataset: str | None = None,
        key: str | None = None,
        entry: str | None = None,
        path: str | None = None,
    ) -> SampleDecodeError:
        """Fill in where the sample is, where not known yet; returns ``self`` (to re-raise)."""
        self.dataset = self.dataset or dataset
        self.key = self.key if self.key is not None else key
        self.entry = self.entry if self.entry is not None else entry
        self.path = self.path or path
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        # Across processes (Dask, DataLoader workers) with every field, not the first message.
        fields: dict[str, Any] = {
            "content_type": self.content_type,
            "dataset": self.dataset,
            "key": self.key,
            "entry": self.entry,
            "path": self.path,
            "offset": self.offset,
            "writing": self.writing,
            "source": self.source,
        }
        return (functools.partial(SampleDecodeError, **fields), (self.reason,))

    @property
    def message(self) -> str:
        # Built when shown: readers add the dataset and the shard after it was raised.
        parts = []
        if self.dataset is not None:
            parts.append(f"dataset {self.dataset!r}")
        if self.key is not None:
            parts.append(f"key {self.key!r}")
        if self.entry is not None:
            parts.append(f"entry {self.entry!r}")
        if self.path:
            parts.append(f"shard {self.path}")
        where = ", ".join(parts) if parts else "an entry"
        what = f" ({self.content_type})" if self.content_type else ""
        if self.source:
            what += f" from file {self.source}"
        if self.writing:
            return f"refusing to write {where}{what}: it would not decode: {self.reason}"
        return f"cannot decode {where}{what}: {self.reason}"


class VersionError(FormatError):
    """The file's format version cannot be read by this version of shardcat."""


class HistoryWarning(UserWarning):
    """A commit landed in the catalog, but the dataset's manifest beside its shards was not written.

    The message says what to run once the store is reachable
    (``shardcat verify --write-history DATASET``).
    """


class NewerVersionWarning(UserWarning):
    """A shard has a newer minor format version; unknown additions are ignored."""


# --- writing --------------------------------------------------------------


class SettingError(ShardcatError, ValueError):
    """A setting (docs/CONFIG.md), or the argument that stands for it, has a value it does not
    take; the message names it (and its variable)."""


class InvalidKeyError(ShardcatError, ValueError):
    """A key (or entry name) is empty, not valid UTF-8 or too long."""


class ExportNameError(InvalidKeyError):
    """A sample a WebDataset tar cannot hold so that it reads back the same: a key or
    entry name WebDataset would read otherwise, or a sample without entries.

    ``key`` and ``entry`` name the first sample refused (``entry`` is empty for a
    sample without entries).
    """

    def __init__(self, *args: object, key: str = "", entry: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.key = key
        self.entry = entry


class RecordTooLargeError(ShardcatError, ValueError):
    """A record or one of its fields exceeds a limit of the format."""


class WriterClosedError(ShardcatError, ValueError):
    """A record was added to a writer that is already closed."""


class CodecUnavailableError(ShardcatError, ImportError):
    """An entry uses a compression codec whose library is not installed."""


class DuplicateKeyError(ShardcatError, ValueError):
    """The same key was written twice into one shard or one dataset."""

    def __init__(
        self, message: str, keys: list[str] | None = None, *, hint: Hint | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.keys = list(keys or [])


class ProgressCallbackError(ShardcatError):
    """The progress callback given to ``shardcat.write`` raised; the job was aborted.

    The callback's own exception is the ``__cause__``.
    """


class EmptySourceError(ShardcatError, FileNotFoundError):
    """A source to pack (folder, URL, glob or one of its brace alternatives) holds no file.

    Attributes
    ----------
    source:
        The source URL or pattern (never with credentials).
    """

    def __init__(self, message: str, *, source: str | None = None) -> None:
        super().__init__(message)
        self.source = source


class SourceIsShardsError(ShardcatError, ValueError):
    """A source to pack holds only shardcat shards (most likely SRC and URL were swapped), or a
    folder to index in place holds shardcat's own shards (a dataset's folder, or one inside it).

    Attributes
    ----------
    source:
        The source URL or pattern (never with credentials).
    """

    def __init__(
        self, message: str, *, hint: Hint | None = None, source: str | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.source = source


class UnmatchedFilesError(ShardcatError, ValueError):
    """Files of a source do not fit the key rule (no entry name): packing them would lose them.

    Attributes
    ----------
    paths:
        The files' paths relative to the source (all of them, sorted).
    """

    def __init__(
        self, message: str, paths: list[str] | None = None, *, hint: Hint | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.paths = list(paths or [])


class SchedulerUnreachableError(ShardcatError, ConnectionError):
    """No Dask scheduler answers at the address given (``--scheduler``)."""


class WorkersLostError(ShardcatError, TimeoutError):
    """A job's Dask cluster had no workers for longer than ``dask_no_workers_timeout``.

    Every worker died (or none was started) and none came back: the job stops
    waiting instead of hanging. The message says what became of the job and
    how to resume it (a write stays open: rerun it with its job name).

    Attributes
    ----------
    dataset:
        The job's dataset.
    job_id:
        The job's id in the catalog (None for a copy, whose job begins after its tasks).
    job_name:
        The write job's name, if it has one.
    seconds:
        How long the cluster had had no workers.
    """

    def __init__(
        self,
        message: str,
        *,
        hint: Hint | None = None,
        dataset: str = "",
        job_id: int | None = None,
        job_name: str | None = None,
        seconds: float = 0.0,
    ) -> None:
        super().__init__(message, hint=hint)
        self.dataset = dataset
        self.job_id = job_id
        self.job_name = job_name
        self.seconds = seconds


class WorkersHeldError(WorkersLostError):
    """A job's tasks waited longer than ``dask_no_workers_timeout`` behind abandoned tasks.

    A task whose client died (killed, or disconnected) goes on running on its
    worker (Dask cannot interrupt it), and the scheduler sends that worker
    new tasks, which wait behind it: for ever if it is blocked. The message
    names each such worker and task and says to restart the worker.

    Attributes
    ----------
    workers:
        The held workers' addresses.
    """

    def __init__(self, message: str, *, workers: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.workers = list(workers or [])


class JobInterrupted(KeyboardInterrupt):
    """Ctrl-C (``KeyboardInterrupt``) stopped a shardcat job; the message says what became of it.

    Not a :class:`ShardcatError`: an interrupt is no error, and code that
    catches ``Exception`` must never swallow one. It is a ``KeyboardInterrupt``,
    so ``except KeyboardInterrupt`` catches it; like a ShardcatError it
    carries a :class:`Hint` (how to resume the job or remove what it wrote) and
    renders it per interface, which is how the CLI prints it as one line.
    """

    def __init__(self, message: str, *, hint: Hint | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def render(self, interface: Interface = "python") -> str:
        """The message followed by the hint for ``interface``."""
        message = str(self.args[0])
        return message if self.hint is None else f"{message}; {getattr(self.hint, interface)}"

    def __str__(self) -> str:
        return self.render("python")


# --- lookups and storage --------------------------------------------------


class KeyNotFoundError(ShardcatError, KeyError):
    """No record has this key."""


class EntryNotFoundError(ShardcatError, KeyError):
    """A record has no entry of that name (``record["jpeg"]``).

    A :class:`KeyError` (its ``args`` are the name alone), so ``record.get``,
    ``in`` and code written for a dict work as before; the message names the
    entries the record has.

    Attributes
    ----------
    name:
        The name asked for.
    key:
        The record's key.
    names:
        The record's entry names, in write order.
    """

    def __init__(
        self, name: object, *, key: str | None = None, names: tuple[str, ...] = ()
    ) -> None:
        super().__init__(name)
        self.name = name
        self.key = key
        self.names = names

    @property
    def message(self) -> str:
        return f"record {self.key!r} has no entry {self.name!r}; its entries are {list(self.names)}"


class ShardNotFoundError(ShardcatError, FileNotFoundError):
    """A shard file the catalog or the caller names does not exist.

    Attributes
    ----------
    path:
        The shard's URL or path (never with credentials), if known.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class StorageError(ShardcatError, OSError):
    """Reading or writing the object store failed.

    Attributes
    ----------
    path:
        The file's URL or path (never with credentials), if known.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class ObjectExistsError(StorageError, FileExistsError):
    """Publication refused to replace an object that exists (shards are written once)."""


class StorageCredentialsError(StorageError, PermissionError):
    """The store asked for credentials and none were found (nothing was sent)."""


class StoragePermissionError(StorageError, PermissionError):
    """The store refused the request: credentials rejected, or not allowed here (HTTP 401/403)."""


class StorageUnreachableError(StorageError, ConnectionError):
    """The store's endpoint could not be reached (refused, unknown host, timed out)."""


class StorageFullError(StorageError):
    """The disk or quota is full (ENOSPC, EDQUOT): nothing was published; free space and rerun."""


class BucketNotFoundError(ShardNotFoundError, StorageError):
    """The bucket (S3, GCS) or container (Azure) of a URL does not exist.

    shardcat never creates one: a typo in a URL must not make a new bucket.

    Attributes
    ----------
    bucket:
        The bucket's or container's name.
    """

    def __init__(self, message: str, *, path: str | None = None, bucket: str = "") -> None:
        super().__init__(message, path=path)
        self.bucket = bucket


# --- the catalog ----------------------------------------------------------


class CatalogError(ShardcatError):
    """The catalog database could not do what was asked."""


class SchemaVersionError(CatalogError):
    """The catalog's schema is older (or newer) than this version of shardcat."""


class RecordsRebuildError(CatalogError, RuntimeError):
    """Rebuilding ``records`` (a migration, ``shardcat catalog partition``) would lose what it
    cannot make again (a trigger, a publication, a column of your own): refused, nothing changed.

    The message names what to drop first and make again after.
    """


class InvalidNameError(CatalogError, InvalidKeyError):
    """A dataset name, key or entry name that the catalog cannot hold.

    Empty, over 255 characters (a dataset name), not valid Unicode text (a
    lone surrogate), or holding a NUL character in a PostgreSQL catalog,
    whose text columns cannot store one.
    """


class CatalogClosedError(CatalogError, ValueError):
    """The :class:`~shardcat.Catalog` was closed: it serves no more calls, from any thread.

    Open a new ``Catalog`` on the same URL (or keep this one open until every
    thread is done with it).
    """


class CatalogLockedError(CatalogError):
    """Another process holds a lock on the catalog for longer than the busy timeout."""


class CatalogUnreachableError(CatalogError, ConnectionError):
    """The catalog's database server refused the connection or did not answer.

    Check that the server is running and that the URL's host, port, user and
    database are right.
    """


class DatasetNotFoundError(CatalogError, KeyError):
    """No dataset of this name is registered in the catalog."""


class TokenNotFoundError(CatalogError, KeyError):
    """No access token of ``shardcat serve`` has this name or id in the catalog."""


class JobNotFoundError(CatalogError, KeyError):
    """No job with this id is registered in the catalog."""


class DatasetExistsError(CatalogError):
    """A dataset of this name exists already and the mode does not allow replacing it."""

    APPEND_OR_OVERWRITE = Hint(
        python="write with mode='append' to add to it or mode='overwrite' to replace it",
        cli="write with --mode append to add to it or --mode overwrite to replace it",
    )
    """The hint of a write in mode ``create`` that found records."""


class DatasetRootError(CatalogError, ValueError):
    """A write names another folder than the one the dataset keeps its shards in."""


class JobExistsError(CatalogError):
    """A named job ran already, or runs elsewhere: rerunning it would write its records twice."""


class JobInputsChangedError(JobExistsError, ValueError):
    """A resumed write job was given other inputs than the run that began it.

    Its finished partitions hold what the first run was given; writing the
    rest from other data would commit a mix of the two. The message names
    what differs.
    """

    OVERRIDE = Hint(
        python="if the finished partitions may stay as they are, pass "
        "allow_changed_inputs=True; else choose a new job_name to write everything anew",
        cli="if the finished partitions may stay as they are, add --allow-changed-inputs; "
        "else choose a new --job-name to write everything anew",
    )


class DestinationNotEmptyError(ShardcatError, FileExistsError):
    """A copy's destination folder holds objects that are not this copy's shards, or an
    export's destination holds tars already."""


class CommitConflictError(CatalogError):
    """Another writer changed the dataset between this job's start and its commit."""


class KeyConflictError(CommitConflictError):
    """Keys the job changes were changed by another commit since the job began.

    ``keys`` names them (at most 1,000). Nothing of the job became visible:
    rerun it against the current version.
    """

    def __init__(
        self, message: str, keys: list[str] | None = None, *, hint: Hint | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.keys = list(keys or [])


class UnknownKeysError(KeyNotFoundError, CatalogError):
    """Entries or values were given for keys the dataset does not have (``add_entries``,
    ``update_fields``).

    ``keys`` names some of them (at most 1,000). Nothing of the job (or the
    update) became visible; ``on_missing="skip"`` leaves such samples out instead.
    """

    def __init__(
        self, message: str, keys: list[str] | None = None, *, hint: Hint | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.keys = list(keys or [])


class EntryExistsError(CatalogError, ValueError):
    """A group's entry has a name the sample already has in its base or another group.

    ``names`` lists the names, ``keys`` some samples that have them. Nothing
    of the job became visible; ``replace_entries=True`` makes the new entry
    replace the old one from the new version on.
    """

    def __init__(
        self,
        message: str,
        names: list[str] | None = None,
        keys: list[str] | None = None,
        *,
        hint: Hint | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.names = list(names or [])
        self.keys = list(keys or [])


class GroupNotFoundError(CatalogError, KeyError):
    """The dataset has no live column group of that name."""


class GroupsUnsupportedError(CatalogError, ValueError):
    """An operation that does not handle column groups met a dataset that has some.

    Every operation handles them since phase 2 (docs/GROUPS.md §6) but one: a fold
    of groups (``compact(fold_groups=)``) into a base indexed in place (tars, a
    folder, MDS/LitData), whose base is the user's files.
    """


class KeyOrderUnavailableError(CatalogError, ValueError):
    """An operation reads keys in key order (a listing, a prefix), and the dataset has no key-order index.

    A dataset created with ``keys="unsorted"`` raises it; ``keys="hash"`` raises its subclass
    :class:`KeyTextUnavailableError` (no key text, so no order either).
    """


class KeyTextUnavailableError(KeyOrderUnavailableError):
    """An operation needs keys' text, and the dataset keeps only their hashes (``keys="hash"``)."""


class VersionNotFoundError(CatalogError, KeyError):
    """The dataset has no such version (never made, or expired) or no such tag."""


class QueryError(CatalogError):
    """A query a user wrote (``shardcat sql``) failed in the database: their SQL, not the catalog.

    Attributes
    ----------
    sqlstate:
        The SQLSTATE code (PostgreSQL, ``"42P01"``) or SQLite error name
        (``"SQLITE_ERROR"``), if known.
    undefined_object:
        The query named a table or column the database does not have.
    """

    def __init__(
        self, message: str, *, sqlstate: str | None = None, undefined_object: bool = False
    ) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.undefined_object = undefined_object


class QueryTimeoutError(CatalogError, TimeoutError):
    """A read-only query (``shardcat sql``) ran longer than its timeout and was cancelled."""


class QueryRefusedError(QueryError, ValueError):
    """A query or ``where=`` filter a user wrote was refused before it ran.

    The message says what was refused and why: not one read statement
    (``shardcat sql``), not one expression over the allowed columns and
    functions (``where=``), or a function with side effects (PostgreSQL).
    """


class QueryLimitError(QueryError):
    """A read-only query's result passed a bound it runs under (rows or bytes); the message
    names the bound and how to raise it."""


class BatchSenderGoneError(ShardcatError, RuntimeError):
    """A packed batch arrived after the process that packed it exited: its shared memory went with it."""


# --- shardcat serve -------------------------------------------------------


class ExtraNotInstalledError(ShardcatError, ImportError):
    """A part of shardcat needs an optional extra that is not installed; the message names it
    (``pip install 'shardcat[serve]'``)."""


class AccessDeniedError(ShardcatError, PermissionError):
    """``shardcat serve`` refused a request's credentials: no token, an unknown, expired or
    revoked one (HTTP 401), or one whose scope does not allow what it asked (HTTP 403).

    Attributes
    ----------
    status:
        401 (who are you?) or 403 (not with this token).
    """

    def __init__(self, message: str, *, status: int = 401, hint: Hint | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status


class BadRequestError(ShardcatError, ValueError):
    """A request to ``shardcat serve`` is malformed: a parameter, a body or a path segment."""


class RequestTooLargeError(ShardcatError, ValueError):
    """A request to ``shardcat serve`` asks for more than its limits allow (batch size,
    response bytes); the message names the limit and its setting."""


class RateLimitedError(ShardcatError):
    """A token (or an anonymous client) of ``shardcat serve`` sent requests faster than
    ``serve_rate_limit`` allows; ``retry_after`` is how many seconds to wait.

    Attributes
    ----------
    retry_after:
        Seconds until the next request is accepted.
    """

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after
