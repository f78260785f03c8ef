"""The CLI's output interface: one method per kind of thing a command prints.

Commands hand the library's results to an :class:`Output` and never ask
which one they have: :class:`~shardcat.cli.output.text.TextOutput` draws
rich tables and progress bars for people, and
:class:`~shardcat.cli.output.documents.JsonOutput` prints one JSON document
for programs. Results go to stdout; progress, notes and errors to stderr,
the same whatever the output.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from rich.console import Console

if TYPE_CHECKING:
    from ...catalog import (
        CatalogReport,
        DatasetInfo,
        ExpireResult,
        GroupInfo,
        ShardRow,
        VersionDiff,
        VersionInfo,
    )
    from ...catalog.readonly import ReadOnlyRole
    from ...demo import DemoReport
    from ...format import Record, VerifyReport
    from ...orchestration import (
        CompactSummary,
        CopySummary,
        IndexColumnarSummary,
        IndexFilesSummary,
        IndexTarSummary,
        WriteProgressCallback,
        WriteSummary,
    )
    from ...orchestration.gc import DeleteReport, GcReport
    from ...orchestration.watch import TaskProgressCallback
    from ...reading import HistoryRebuild

__all__ = ["Output", "QueryRows", "ShardInspection", "VerifyProgressCallback", "err_console"]

# soft_wrap: an error is one line, whatever the terminal width (logs, grep).
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

VerifyProgressCallback = Callable[[str, int], None]
"""``on_shard(url, total)`` of :meth:`shardcat.Catalog.verify`."""


class QueryRows(Protocol):
    """The rows of a ``shardcat sql`` query as they arrive (a
    :class:`~shardcat.catalog.readonly.QueryStream`): iterate once; ``cut`` and
    ``rows`` are final afterwards."""

    columns: tuple[str, ...]
    limit: int
    max_bytes: int
    rows: int
    cut: str | None

    def __iter__(self) -> Iterator[tuple[Any, ...]]: ...


@dataclass(frozen=True, slots=True)
class ShardInspection:
    """What ``shardcat inspect`` read from one shard file, ready to print.

    Attributes
    ----------
    fields:
        Header and footer values by name, in the order they are shown.
    entry_kinds:
        One dict per entry kind: name, content type, codec, count, bytes.
    metadata:
        The shard's user metadata.
    records:
        The first records (index, key, offset, length, entry names), or
        ``None`` if none were asked for.
    verified:
        The result of a full verification, or ``None`` if none was asked for.
    """

    fields: dict[str, Any]
    entry_kinds: list[dict[str, Any]]
    metadata: dict[str, Any]
    records: list[dict[str, Any]] | None
    verified: VerifyReport | None


class Output(ABC):
    """Prints what the commands produce, as text or as JSON.

    Each method prints one command's result (or one part of it) to stdout.
    The shared methods :meth:`error` and :meth:`note` write to stderr,
    identically for every output.
    """

    name: ClassVar[str]
    """``"text"`` or ``"json"``: what ``--json`` chose."""

    # --- stderr, the same for every output ---------------------------------

    def error(self, message: str) -> None:
        """One ``error: ...`` line on stderr (the command then exits non-zero)."""
        err_console.print("[red]error:[/red] ", end="")
        err_console.print(message, markup=False)  # data (keys, URLs), never markup

    def note(self, message: str) -> None:
        """A line on stderr that is not the result: a warning, a hint, a question."""
        err_console.print(message, markup=False)

    # --- write --------------------------------------------------------------

    @abstractmethod
    def write_progress(
        self, enabled: bool = True
    ) -> AbstractContextManager[WriteProgressCallback | None]:
        """A drawer for ``shardcat.write(progress=...)`` while the context lasts, or ``None``.

        ``enabled=False`` (``--no-progress``) draws nothing in any output.
        """

    @abstractmethod
    def task_progress(
        self, doing: str, unit: str, enabled: bool = True
    ) -> AbstractContextManager[TaskProgressCallback | None]:
        """A ``progress(done, total)`` drawer of a job's tasks (index-tar, copy, ...), or ``None``.

        ``doing`` and ``unit`` word the bar (``indexing 3/10 tars``);
        ``enabled=False`` (``--no-progress``) draws nothing in any output.
        """

    @abstractmethod
    def write_summary(self, summary: WriteSummary) -> None:
        """What a committed write job produced."""

    @abstractmethod
    def compact_summary(self, summary: CompactSummary) -> None:
        """What a compaction rewrote (or that nothing needed it)."""

    @abstractmethod
    def copy_summary(self, summary: CopySummary) -> None:
        """What a committed copy or move produced."""

    @abstractmethod
    def tar_indexed(
        self, summary: IndexTarSummary | IndexFilesSummary | IndexColumnarSummary
    ) -> None:
        """What a committed ``index-tar``, ``index-files``, ``index-mds`` or ``index-litdata`` job
        registered, and what it skipped."""

    @abstractmethod
    def taridx_done(
        self,
        action: str,
        path: str,
        dataset: str,
        tars: int,
        rows: int,
        *,
        shared: tuple[int, int] = (0, 0),
    ) -> None:
        """A ``.taridx`` written (``action="exported"``) or registered (``"imported"``).

        ``shared``: (samples, stems) of samples that share their TARIDX stem.
        """

    # --- datasets: ls, stats, get -------------------------------------------

    @abstractmethod
    def datasets(self, catalog: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Every dataset of the catalog (displayed URL ``catalog``) with its totals."""

    @abstractmethod
    def shards(self, dataset: str, shards: Sequence[ShardRow], *, all_states: bool) -> None:
        """A dataset's shards: the committed ones, or with ``all_states`` every one."""

    @abstractmethod
    def dataset_stats(
        self,
        info: DatasetInfo,
        shards: Sequence[ShardRow],
        entry_kinds: Sequence[Mapping[str, Any]],
        *,
        version: int | None = None,
        hidden_records: int = 0,
        groups: Sequence[GroupInfo] = (),
    ) -> None:
        """A dataset's totals, shard size distribution and entry kinds.

        ``version``: the version described (default the dataset's latest);
        ``hidden_records``: records its shards hold that it does not serve;
        ``groups``: its column groups (their shards are not among ``shards``).
        """

    @abstractmethod
    def sample(self, record: Record, *, raw_entry: str | None = None) -> None:
        """One looked-up sample; ``raw_entry``: only that entry was asked for.

        Raises
        ------
        typer.Exit
            If the text output would write binary bytes to a terminal.
        """

    @abstractmethod
    def samples(self, records: Sequence[Record], missing: Sequence[str]) -> None:
        """The samples of a batch lookup, and the keys that were not found."""

    @abstractmethod
    def saved(
        self,
        folder: Path,
        files: Sequence[Mapping[str, Any]],
        samples: int,
        missing: Sequence[str],
    ) -> None:
        """Entries saved as files under ``folder`` (key, entry, path, bytes each)."""

    # --- maintenance: verify, reindex, gc, delete ---------------------------

    @abstractmethod
    def verify_progress(self, total: int) -> AbstractContextManager[VerifyProgressCallback | None]:
        """An ``on_shard`` callback drawing verify's progress over ``total`` shards, or ``None``."""

    @abstractmethod
    def verify_report(self, dataset: str, report: CatalogReport) -> None:
        """What verify checked and every problem it found."""

    @abstractmethod
    def reindexed(self, dataset: str, rows: Sequence[ShardRow]) -> None:
        """The shard rows reindex rebuilt."""

    @abstractmethod
    def history_rebuilt(self, rebuilt: HistoryRebuild, rows: Sequence[ShardRow]) -> None:
        """What reindex of a folder with manifests put back: versions, tags, the shards' rows."""

    # --- versions: log, tag, untag, diff, delete-keys, expire ----------------

    @abstractmethod
    def version_log(self, dataset: str, versions: Sequence[VersionInfo]) -> None:
        """A dataset's kept versions, newest first, with counts and tags."""

    @abstractmethod
    def groups(self, dataset: str, groups: Sequence[GroupInfo]) -> None:
        """A dataset's column groups (``shardcat groups``)."""

    @abstractmethod
    def version_change(self, message: str, document: Mapping[str, Any]) -> None:
        """What tag, untag or delete-keys did: a line of text, or the document as JSON."""

    @abstractmethod
    def version_diff(self, diff: VersionDiff) -> None:
        """Keys added, removed and replaced between two versions (and the keys, if listed)."""

    @abstractmethod
    def expired(self, result: ExpireResult, *, dry_run: bool) -> None:
        """Versions expired (or, with ``dry_run``, that would be) and shards retired."""

    @abstractmethod
    def gc_report(self, report: GcReport) -> None:
        """What gc removed, or (dry run) would remove."""

    @abstractmethod
    def deleted(self, dataset: str, report: DeleteReport, *, shards: int, size: int) -> None:
        """A deleted dataset: ``shards`` rows of ``size`` bytes in all."""

    # --- shard files: inspect, demo -----------------------------------------

    @abstractmethod
    def inspection(self, shard: ShardInspection) -> None:
        """One shard file's header, footer, entry kinds, metadata and first records."""

    @abstractmethod
    def demo_report(self, report: DemoReport) -> None:
        """What the demo did and how fast."""

    # --- the catalog: sql, catalog ... --------------------------------------

    @abstractmethod
    def query_result(self, result: QueryRows) -> None:
        """The rows of a read-only SQL query, printed as they arrive (memory stays bounded).

        Whether rows were left out (``result.cut``) is part of the result.
        """

    @abstractmethod
    def keys(self, dataset: str, keys: Iterator[str]) -> None:
        """A dataset's keys, printed as they arrive (``shardcat keys``)."""

    @abstractmethod
    def key_count(self, dataset: str, prefix: str | None, count: int) -> None:
        """How many keys a dataset has (with ``prefix``): ``shardcat count``."""

    @abstractmethod
    def catalog_upgraded(self, catalog: str, before: str | None, after: str | None) -> None:
        """A schema upgrade of the catalog (displayed URL) from one revision to another."""

    @abstractmethod
    def records_partitioned(self, catalog: str, before: int, after: int) -> None:
        """``shardcat catalog partition``: records' partitions before and after (0: one plain table)."""

    @abstractmethod
    def catalog_revision(self, catalog: str, revision: str | None, head: str | None) -> None:
        """The catalog's schema revision, and the newest this shardcat knows."""

    @abstractmethod
    def readonly_role(self, catalog: str, role: ReadOnlyRole) -> None:
        """A read-only PostgreSQL role that was created or updated."""
