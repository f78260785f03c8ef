"""The default output: rich tables and lines on stdout, progress bars on stderr, for people.

With ``tsv=True`` (``--output tsv``, the default when stdout is not a
terminal) every table is plain text instead: a header line, then one line per
row, cells separated by tabs, numbers unformatted (``1234567``, not
``1,234,567`` or ``1.2 MB``) and every value whole. A tab, newline, carriage
return or backslash inside a value is written ``\t``, ``\n``, ``\r``, ``\\``
(as PostgreSQL's COPY text format does), so one row is always one line.
Several tables (``stats``, ``inspect``) are separated by an empty line; the
summary line after a table goes to stderr, so stdout holds only rows.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..._units import count_of, format_bytes
from ..invocation import command_name
from .base import Output, QueryRows, ShardInspection, VerifyProgressCallback, err_console
from .documents import describe_entry, stats_doc, timestamp

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
    from ...format import Entry, Record
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

__all__ = ["TextOutput", "text_cell", "tsv_cell"]

_PAGE_ROWS = 1000  # sql --limit 0 in a table: one table per this many rows
_TEXT_CELL_CHARS = 4096  # a longer text value is shortened in tables (rich needs ~4 s per MB)


def text_cell(value: Any) -> Any:
    """A SQL result value for a table: short bytes as hex, long ones and long text shortened."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        return raw.hex() if len(raw) <= 32 else f"<{len(raw):,} bytes>"
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, str) and len(value) > _TEXT_CELL_CHARS:
        rest = len(value) - _TEXT_CELL_CHARS
        return f"{value[:_TEXT_CELL_CHARS]}… (+{rest:,} characters; --json prints whole values)"
    return value


_TSV_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def tsv_cell(value: Any) -> str:
    """A value as one TSV cell: whole, bytes as hex, dates ISO 8601, tabs and newlines escaped."""
    if isinstance(value, Cell):
        value = value.value
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, (dict, list)):
        value = json.dumps(value, ensure_ascii=False)
    return str(value).translate(_TSV_ESCAPES)


_SPREAD = ("min", "median", "max")


class Cell:
    """A value shown one way in a table (``1.2 MB``) and written as it is in TSV (``1234567``)."""

    __slots__ = ("shown", "value")

    def __init__(self, value: Any, shown: str) -> None:
        self.value = value
        self.shown = shown

    def __str__(self) -> str:
        return self.shown


def _count(n: int) -> Cell:
    return Cell(n, f"{n:,}")


def _size(n: int) -> Cell:
    return Cell(n, format_bytes(n))


class TextOutput(Output):
    """Tables and lines for a terminal (rich), or TSV for pipes; data is never parsed as markup.

    Parameters
    ----------
    tsv:
        Write tables as tab-separated rows under a header line (module docstring).
    """

    name: ClassVar[str] = "text"

    def __init__(self, *, tsv: bool = False) -> None:
        self.console = Console(highlight=False, soft_wrap=True)
        self.tsv = tsv
        self._tables = 0

    # --- the building blocks ------------------------------------------------

    def _table(self, title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        if self.tsv:
            self._tsv(columns, rows)
            return
        t = Table(title=Text(title, style="table.title"), title_justify="left", show_lines=False)
        for c in columns:
            t.add_column(c, overflow="fold")
        for row in rows:
            # Text, not str: values are data (keys, URLs), never rich markup.
            t.add_row(*(Text("" if v is None else str(v)) for v in row))
        self.console.print(t)

    def _tsv(self, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        """A header line and one line per row, written as the rows come (they may be a stream)."""
        out = sys.stdout
        if self._tables:
            out.write("\n")
        self._tables += 1
        out.write("\t".join(tsv_cell(c) for c in columns) + "\n")
        for row in rows:
            out.write("\t".join(tsv_cell(v) for v in row) + "\n")
        out.flush()

    def _fields(self, title: str, values: Mapping[str, Any]) -> None:
        """A two-column table of name → value."""
        if self.tsv:
            self._tsv(["field", "value"], [[k, v] for k, v in values.items()])
            return
        t = Table(title=Text(title, style="table.title"), title_justify="left", show_header=False)
        t.add_column("field", style="bold")
        t.add_column("value", overflow="fold")
        for k, v in values.items():
            t.add_row(
                Text(k),
                Text(json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else str(v)),
            )
        self.console.print(t)

    def _line(self, text: str, *, markup: bool = False) -> None:
        """A line of text; ``markup=True`` only for lines written here, never made of data."""
        self.console.print(text, markup=markup)

    def _summary(self, text: str, *, markup: bool = False) -> None:
        """The line under a table: on stdout beside a table, on stderr beside TSV rows."""
        if self.tsv:
            err_console.print(text, markup=markup)
        else:
            self._line(text, markup=markup)

    # --- write --------------------------------------------------------------
    # docstrings inherited

    def write_progress(
        self, enabled: bool = True
    ) -> AbstractContextManager[WriteProgressCallback | None]:
        if not enabled:
            return contextlib.nullcontext(None)
        from ...orchestration.progress_bar import WriteProgressBar

        # rich's global console: the CLI points it at stderr (stdout is for results).
        return WriteProgressBar()

    def task_progress(
        self, doing: str, unit: str, enabled: bool = True
    ) -> AbstractContextManager[TaskProgressCallback | None]:
        # A transient bar leaves a blank line on a stderr that is no terminal (a log, a
        # pipe): there, an error stays the one line it is.
        if not enabled or not err_console.is_terminal:
            return contextlib.nullcontext(None)
        return _task_bar(doing, unit)

    def write_summary(self, summary: WriteSummary) -> None:
        self._line(str(summary))
        for pattern in summary.shard_patterns:
            self._line(f"  {pattern}")

    def compact_summary(self, summary: CompactSummary) -> None:
        self._line(str(summary))

    def copy_summary(self, summary: CopySummary) -> None:
        self._line(str(summary))
        for url in summary.sources_left:
            self._line(f"  not removed (no longer used: delete it): {url}")

    def tar_indexed(
        self, summary: IndexTarSummary | IndexFilesSummary | IndexColumnarSummary
    ) -> None:
        self._line(str(summary))
        for f in summary.failed:
            err_console.print(f"skipped {f.url}: {f.error}: {f.message}", markup=False)

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
        self._line(
            f"{action} {path}: dataset {dataset!r}, {count_of(tars, 'tar')}, {count_of(rows, 'member row')}"
        )
        samples, stems = shared
        if samples:
            self._line(
                f"{samples:,} samples share a stem with another sample ({stems:,} stem(s)): "
                "TARIDX names a sample by the name after its last '/', so they are one "
                "stem there"
            )

    # --- datasets -----------------------------------------------------------

    def datasets(self, catalog: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self._table(
            f"Datasets in {catalog}",
            ["name", "root", "shards", "records", "bytes", "created"],
            [
                [
                    r["name"],
                    r["root"],
                    r["shards"],
                    _count(r["records"]),
                    _size(r["bytes"]),
                    r["created"],
                ]
                for r in rows
            ],
        )
        if not rows:
            self._summary("no datasets yet: write one with `shardcat write SRC URL -d NAME`")

    def shards(self, dataset: str, shards: Sequence[ShardRow], *, all_states: bool) -> None:
        self._table(
            f"Shards of {dataset}" + ("" if all_states else " (committed)"),
            ["url", "state", "records", "bytes", "created"],
            [
                [
                    s.url,
                    s.state,
                    _count(s.record_count),
                    _size(s.size_bytes),
                    timestamp(s.created_at),
                ]
                for s in shards
            ],
        )
        committed = [s for s in shards if s.state == "committed"]
        by_state = Counter(s.state for s in shards)
        states = ", ".join(f"{n} {state}" for state, n in sorted(by_state.items()))
        self._summary(
            count_of(len(shards), "shard")
            + (f" ({states})" if all_states and shards else "")
            + ": "
            f"{sum(s.record_count for s in committed):,} committed records, "
            f"{format_bytes(sum(s.size_bytes for s in committed))}"
        )

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
        doc = stats_doc(info, shards, entry_kinds, version=version, hidden_records=hidden_records)

        def size(v: float | int | None) -> str:
            return "-" if v is None else format_bytes(v)

        sb, sr = doc["shard_bytes"], doc["shard_records"]
        self._fields(
            f"Dataset {info.name}",
            {
                "root": info.root_url,
                "created": timestamp(info.created_at),
                "version": doc["version"],
                "shards": len(shards),
                "records": _count(doc["records"]),
                "hidden records": _count(doc["hidden_records"]),
                "bytes": Cell(doc["bytes"], f"{doc['bytes']:,} ({format_bytes(doc['bytes'])})"),
                "payload bytes": Cell(
                    doc["payload_bytes"],
                    f"{doc['payload_bytes']:,} ({format_bytes(doc['payload_bytes'])})",
                ),
                "shard size min / median / max": Cell(
                    " / ".join("-" if sb[k] is None else str(sb[k]) for k in _SPREAD),
                    " / ".join(size(sb[k]) for k in _SPREAD),
                ),
                "records per shard min / median / max": Cell(
                    " / ".join("-" if sr[k] is None else str(sr[k]) for k in _SPREAD),
                    " / ".join("-" if sr[k] is None else f"{sr[k]:,}" for k in _SPREAD),
                ),
            },
        )
        self._table(
            "Entry kinds",
            ["name", "content_type", "codec", "records"],
            [[k["name"], k["content_type"], k["codec"], _count(k["records"])] for k in entry_kinds],
        )
        if groups:
            self.groups(info.name, groups)

    def sample(self, record: Record, *, raw_entry: str | None = None) -> None:
        if raw_entry is None:
            self._sample(record)
            return
        entry = record.entries[raw_entry]
        if sys.stdout.isatty() and describe_entry(entry)[1] is False:
            self.note(
                f"error: entry of {record.key!r} is {len(entry):,} bytes of {entry.content_type}; "
                "redirect stdout to a file (> FILE) or save it with -o DIR"
            )
            raise typer.Exit(1)
        # Raw bytes, binary-safe, for pipes.
        sys.stdout.flush()
        sys.stdout.buffer.write(entry.view)
        sys.stdout.buffer.flush()

    def _sample(self, record: Record) -> None:
        self._fields(
            f"Sample {record.key}",
            {name: _shown(entry) for name, entry in record.entries.items()} or {"(no entries)": ""},
        )

    def samples(self, records: Sequence[Record], missing: Sequence[str]) -> None:
        if self.tsv:  # piped: one table, each line naming its sample (as titles do on a terminal)
            self._tsv(
                ["key", "field", "value"],
                [[r.key, name, _shown(e)] for r in records for name, e in r.entries.items()],
            )
            return
        for r in records:
            self._sample(r)

    def saved(
        self,
        folder: Path,
        files: Sequence[Mapping[str, Any]],
        samples: int,
        missing: Sequence[str],
    ) -> None:
        total = sum(f["bytes"] for f in files)
        self._line(
            f"saved {count_of(len(files), 'file')}, {format_bytes(total)}, of {count_of(samples, 'sample')} to {folder}"
        )

    # --- maintenance --------------------------------------------------------

    def verify_progress(self, total: int) -> AbstractContextManager[VerifyProgressCallback | None]:
        return _verify_bar(total)

    def verify_report(self, dataset: str, report: CatalogReport) -> None:
        summary = (
            f"{count_of(report.shards_checked, 'shard')}, {count_of(report.records_checked, 'record')}, "
            f"{format_bytes(report.bytes_checked)} checked"
            + (" (quick: headers, trailers and row counts; no record read)" if report.quick else "")
        )
        if report.ok:
            self._line(
                f"[green]ok:[/green] dataset {escape(repr(dataset))}: {summary}, no problems",
                markup=True,
            )
            return
        self._table(
            f"Problems in {dataset}",
            ["shard", "kind", "detail"],
            [[p.url, p.kind, p.message] for p in report.problems],
        )
        bad = len(report.by_shard())
        self._summary(
            f"dataset {dataset!r}: {summary}; {count_of(len(report.problems), 'problem')} in {count_of(bad, 'shard')}"
        )

    def reindexed(self, dataset: str, rows: Sequence[ShardRow]) -> None:
        self._table(
            f"Reindexed shards of {dataset}",
            ["url", "records", "bytes"],
            [[r.url, _count(r.record_count), _size(r.size_bytes)] for r in rows],
        )
        self._summary(
            f"{count_of(len(rows), 'shard')}, {count_of(sum(r.record_count for r in rows), 'record')} reindexed"
        )

    def history_rebuilt(self, rebuilt: HistoryRebuild, rows: Sequence[ShardRow]) -> None:
        tags = ", ".join(f"{name}={number}" for name, number in sorted(rebuilt.tags.items()))
        self.reindexed(rebuilt.dataset, rows)
        self._summary(
            f"rebuilt dataset {rebuilt.dataset!r} from {rebuilt.folder}: "
            f"{count_of(len(rebuilt.versions), 'kept version')} (latest {rebuilt.latest}), "
            f"{count_of(rebuilt.shards, 'shard')}" + (f", tags {tags}" if tags else "")
        )
        if rebuilt.gone:
            self.note(
                f"{count_of(len(rebuilt.gone), 'shard')} only expired versions read were not "
                "registered (`shardcat gc` removes what is left of them)"
            )
        if rebuilt.unlisted:
            self.note(
                f"{count_of(len(rebuilt.unlisted), 'shard file')} in the folder no manifest names "
                f"(left by failed jobs; `shardcat gc` removes them), e.g. {rebuilt.unlisted[0]}"
            )

    def version_log(self, dataset: str, versions: Sequence[VersionInfo]) -> None:
        self._table(
            f"Versions of {dataset}",
            [
                "version",
                "created",
                "operation",
                "job",
                "+records",
                "-records",
                "records",
                "bytes",
                "tags",
                "message",
            ],
            [
                [
                    v.number,
                    timestamp(v.created_at),
                    v.operation,
                    "" if v.job_id is None else v.job_id,
                    v.records_added,
                    v.records_removed,
                    v.total_records,
                    format_bytes(v.total_bytes),
                    ", ".join(v.tags),
                    v.message or "",
                ]
                for v in versions
            ],
        )
        self._summary(count_of(len(versions), "kept version"))

    def groups(self, dataset: str, groups: Sequence[GroupInfo]) -> None:
        self._table(
            f"Column groups of {dataset}",
            ["name", "added", "dropped", "records", "bytes"],
            [
                [
                    g.name,
                    g.added_version,
                    "" if g.dropped_version is None else g.dropped_version,
                    _count(g.records),
                    _size(g.bytes),
                ]
                for g in groups
            ],
        )
        if not groups:
            self._summary(
                f"no groups yet: add one with `shardcat add-entries SRC {dataset} --group NAME`"
            )

    def version_change(self, message: str, document: Mapping[str, Any]) -> None:
        self._line(message)

    def version_diff(self, diff: VersionDiff) -> None:
        self._line(
            f"{diff.dataset} {diff.old} -> {diff.new}: {diff.added} added, "
            f"{diff.removed} removed, {diff.replaced} replaced"
        )
        for what, keys in (
            ("added", diff.added_keys),
            ("removed", diff.removed_keys),
            ("replaced", diff.replaced_keys),
        ):
            for key in keys or []:
                self._line(f"{what}\t{key}")

    def expired(self, result: ExpireResult, *, dry_run: bool) -> None:
        verb = "would expire" if dry_run else "expired"
        shown = ", ".join(str(n) for n in result.expired) or "none"
        retired = "would be retired" if dry_run else "retired"
        self._line(
            f"{result.dataset}: {verb} {count_of(len(result.expired), 'version')} ({shown}); "
            f"{len(result.kept):,} kept; {count_of(len(result.retired_shards), 'shard')} "
            f"{retired}: no kept version reads them (their files go with the next `shardcat gc`)"
        )
        for url in result.retired_shards:
            self._line(f"{retired}\t{url}")

    def gc_report(self, report: GcReport) -> None:
        rows: list[list[Any]] = [["aborted job", j] for j in report.aborted_jobs]
        rows += [["deleted shard", u] for u in report.deleted_shards]
        rows += [["orphan file", u] for u in report.orphans]
        for row in rows:  # size and reason, where gc knows them (removed objects)
            size = report.sizes.get(str(row[1]))
            row += ["" if size is None else format_bytes(size), report.reasons.get(str(row[1]), "")]
        rows += [["kept", k] for k in report.kept]
        rows += [["error", e] for e in report.errors]
        if rows:
            self._table(
                "Would remove" if report.dry_run else "Removed",
                ["what", "item", "size", "reason"],
                rows,
            )
        self._summary(str(report))

    def deleted(self, dataset: str, report: DeleteReport, *, shards: int, size: int) -> None:
        self._line(
            f"deleted dataset {dataset!r}: {len(report.removed)} shard object(s) removed "
            f"({len(report.missing)} already gone, {len(report.kept)} kept) of its {shards} "
            f"({format_bytes(size)} in all)"
        )

    # --- shard files --------------------------------------------------------

    def inspection(self, shard: ShardInspection) -> None:
        size = shard.fields["size"]
        self._fields(
            "Shard", {**shard.fields, "size": Cell(size, f"{size:,} B ({format_bytes(size)})")}
        )
        self._table(
            "Entry kinds",
            ["name", "content_type", "codec", "count", "bytes"],
            [list(s.values()) for s in shard.entry_kinds],
        )
        self._fields("User metadata", shard.metadata or {"(none)": ""})
        if shard.records is not None:
            self._table(
                f"First {count_of(len(shard.records), 'record')}",
                ["#", "key", "offset", "length", "entries"],
                [
                    [x["index"], x["key"], x["offset"], x["length"], ", ".join(x["entries"])]
                    for x in shard.records
                ],
            )
        if shard.verified is not None:
            v = shard.verified
            self._summary(
                f"[green]verified:[/green] {v.records} records, {v.entries} entries, every CRC "
                "and padding byte checked",
                markup=True,
            )

    def demo_report(self, report: DemoReport) -> None:
        for line in report.lines():
            self._line(line)
        self._line(f"try: {command_name()} --catalog {report.catalog} ls demo")

    # --- the catalog --------------------------------------------------------

    def query_result(self, result: QueryRows) -> None:
        columns = list(result.columns)
        if self.tsv:
            self._tsv(columns, result)  # streamed, every value whole
            return
        if result.limit:  # at most `limit` rows: one table
            rows = [[text_cell(v) for v in row] for row in result]
            self._table(count_of(len(rows), "row"), columns, rows)
            return
        # No limit: a table per page of rows, so memory stays bounded however many come.
        page: list[list[Any]] = []
        first = 1
        for row in result:
            page.append([text_cell(v) for v in row])
            if len(page) == _PAGE_ROWS:
                self._table(f"rows {first:,}–{first + len(page) - 1:,}", columns, page)
                first += len(page)
                page = []
        if page or first == 1:
            last = first + len(page) - 1
            title = count_of(len(page), "row") if first == 1 else f"rows {first:,}–{last:,}"
            self._table(title, columns, page)

    def keys(self, dataset: str, keys: Iterator[str]) -> None:
        # One key a line, whatever the output: keys are the whole result (tabs escaped).
        out = sys.stdout
        for key in keys:
            out.write(tsv_cell(key) + "\n")
        out.flush()

    def key_count(self, dataset: str, prefix: str | None, count: int) -> None:
        self._line(str(count))

    def catalog_upgraded(self, catalog: str, before: str | None, after: str | None) -> None:
        if before == after:
            self._line(f"catalog {catalog} is at revision {after} already")
        else:
            self._line(f"catalog {catalog} upgraded from {before or 'empty'} to revision {after}")

    def records_partitioned(self, catalog: str, before: int, after: int) -> None:
        def layout(n: int) -> str:
            return f"{n} hash partitions" if n else "one plain table"

        if before == after:
            self._line(f"catalog {catalog}: records is {layout(after)} already")
        else:
            self._line(
                f"catalog {catalog}: records rebuilt from {layout(before)} to {layout(after)}"
            )

    def catalog_revision(self, catalog: str, revision: str | None, head: str | None) -> None:
        if revision is None:
            self._line(f"none (catalog {catalog} has no schema; run `shardcat catalog upgrade`)")
        elif revision == head:
            self._line(f"{revision} (head)")
        else:
            self._line(
                f"{revision} (this shardcat's head is {head}; run `shardcat catalog upgrade`)"
            )

    def readonly_role(self, catalog: str, role: ReadOnlyRole) -> None:
        verb = "created" if role.created else "updated"
        kind = "LOGIN" if role.login else "NOLOGIN"
        self._line(
            f"{verb} role {role.name} ({kind}): SELECT on {len(role.tables)} catalog tables in "
            f"schema {role.schema} of {catalog}"
        )
        if role.granted_to:
            self._line(f"granted {role.name} to {role.granted_to}")
        self._line(
            f'use it: shardcat sql --role {role.name} "SELECT ..." (or SHARDCAT_SQL_ROLE={role.name})'
        )


def _shown(entry: Entry) -> Any:
    value = describe_entry(entry)[0]
    return value.rstrip("\n") if isinstance(value, str) else value


@contextlib.contextmanager
def _count_bar(doing: str, unit: str, total: int | None) -> Iterator[Callable[[int, int], None]]:
    """A bar on stderr, ``DOING done/total UNIT``; gone when the work ends.

    Yields ``update(done, total)``.
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(
        TextColumn(doing),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as bar:
        task = bar.add_task(doing, total=total)
        yield lambda done, total: bar.update(task, completed=done, total=total)


@contextlib.contextmanager
def _verify_bar(total: int) -> Iterator[VerifyProgressCallback]:
    """verify's bar on stderr: shards checked of ``total``."""
    done = 0

    def on_shard(_url: str, _total: int) -> None:
        nonlocal done
        done += 1
        update(done, total)

    with _count_bar("verifying", "shards", total) as update:
        yield on_shard


def _task_bar(doing: str, unit: str) -> AbstractContextManager[TaskProgressCallback]:
    """A job's bar on stderr: its tasks done of all (known once they are submitted)."""
    return _count_bar(doing, unit, None)
