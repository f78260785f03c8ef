"""``--json``: each command's result as one JSON document on stdout, for programs.

The documents are a stable interface (scripts parse them): keys are only
ever added. The helpers here also give the text output the values it shows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import statistics
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..._redact import redact_url
from .base import Output, QueryRows, ShardInspection, VerifyProgressCallback

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

__all__ = [
    "JsonOutput",
    "describe_entry",
    "json_cell",
    "sample_doc",
    "shard_doc",
    "stats_doc",
    "timestamp",
    "unique_columns",
]


def timestamp(value: dt.datetime | None) -> str | None:
    """A UTC timestamp to the second, for tables."""
    if value is None:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc)
    return value.strftime("%Y-%m-%d %H:%M:%S")


def describe_entry(entry: Entry) -> tuple[Any, bool]:
    """(printable value, whether it is the decoded content) of an entry.

    Text, JSON and raw numbers are decoded; an array (``.npy``, raw) is described
    by its shape and dtype; anything else (or what does not decode) as ``<N bytes type>``.
    """
    ctype = entry.content_type
    base = ctype.split(";", 1)[0].strip()
    if base.startswith("text/") or base == "application/json" or base.endswith("+json"):
        try:
            return entry.decode(), True
        except ValueError:  # undecodable text or JSON: show it as bytes
            pass
    if base in ("application/x-npy", "application/x-raw-array"):
        try:
            a = entry.decode()
            if not hasattr(a, "shape"):  # a raw scalar (an MDS or LitData number): its value
                return a, True
            return f"<array shape={tuple(a.shape)} dtype={a.dtype}>", False
        except ValueError:
            pass
    return f"<{len(entry):,} bytes {ctype}>", False


def sample_doc(record: Record) -> dict[str, Any]:
    """A sample's key and entries; an entry's ``value`` only where it decodes to text or JSON."""
    entries: dict[str, Any] = {}
    for name, entry in record.entries.items():
        value, decoded = describe_entry(entry)
        item: dict[str, Any] = {"content_type": entry.content_type, "bytes": len(entry)}
        if decoded:
            item["value"] = value
        entries[name] = item
    return {"key": record.key, "entries": entries}


def shard_doc(shard: ShardRow) -> dict[str, Any]:
    """A shard's row as ``ls DATASET`` prints it."""
    return {
        "url": shard.url,
        "kind": shard.kind,
        "state": shard.state,
        "shard_number": shard.shard_number,
        "job_id": shard.job_id,
        "records": shard.record_count,
        "bytes": shard.size_bytes,
        "payload_bytes": shard.payload_bytes,
        "created": shard.created_at.isoformat(),
    }


def _spread(values: list[int]) -> dict[str, float | int | None]:
    if not values:
        return {"min": None, "median": None, "max": None}
    median = statistics.median(values)
    if isinstance(median, float) and median.is_integer():
        median = int(median)
    return {"min": min(values), "median": median, "max": max(values)}


def stats_doc(
    info: DatasetInfo,
    shards: Sequence[ShardRow],
    entry_kinds: Sequence[Mapping[str, Any]],
    *,
    version: int | None = None,
    hidden_records: int = 0,
) -> dict[str, Any]:
    """A dataset's totals, shard size and record count spreads, and entry kinds.

    ``records`` is what the version serves; ``hidden_records`` what its
    shards still hold of replaced and deleted keys (``compact`` drops them).
    """
    sizes = [s.size_bytes for s in shards]
    counts = [s.record_count for s in shards]
    return {
        "dataset": info.name,
        "root": info.root_url,
        "created": info.created_at.isoformat(),
        "version": info.version if version is None else version,
        "shards": len(shards),
        "records": sum(counts) - hidden_records,
        "hidden_records": hidden_records,
        "bytes": sum(sizes),
        "payload_bytes": sum(s.payload_bytes for s in shards),
        "shard_bytes": _spread(sizes),
        "shard_records": _spread(counts),
        "entry_kinds": [dict(k) for k in entry_kinds],
    }


def unique_columns(columns: Sequence[str]) -> list[str]:
    """Column names made unique for JSON objects: a second ``id`` becomes ``id_2``."""
    seen: set[str] = set()
    out = []
    for name in columns:
        unique, n = name, 1
        while unique in seen:
            n += 1
            unique = f"{name}_{n}"
        seen.add(unique)
        out.append(unique)
    return out


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def json_cell(value: Any) -> Any:
    """A SQL result value as JSON has it: bytes as hex, dates as ISO 8601, the rest as is."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    return value


class JsonOutput(Output):
    """One JSON document per command on stdout; no tables, no progress bars."""

    name: ClassVar[str] = "json"

    def _print(self, value: Any) -> None:
        print(json.dumps(value, indent=2, ensure_ascii=False, default=str))

    # docstrings inherited

    def write_progress(
        self, enabled: bool = True
    ) -> AbstractContextManager[WriteProgressCallback | None]:
        return contextlib.nullcontext(None)

    def task_progress(
        self, doing: str, unit: str, enabled: bool = True
    ) -> AbstractContextManager[TaskProgressCallback | None]:
        return contextlib.nullcontext(None)

    def write_summary(self, summary: WriteSummary) -> None:
        self._print({**dataclasses.asdict(summary), "mb_per_s": round(summary.mb_per_s, 3)})

    def compact_summary(self, summary: CompactSummary) -> None:
        self._print(dataclasses.asdict(summary))

    def copy_summary(self, summary: CopySummary) -> None:
        self._print(dataclasses.asdict(summary))

    def tar_indexed(
        self, summary: IndexTarSummary | IndexFilesSummary | IndexColumnarSummary
    ) -> None:
        self._print({**dataclasses.asdict(summary), "mb_per_s": round(summary.mb_per_s, 3)})

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
        self._print(
            {
                "action": action,
                "path": path,
                "dataset": dataset,
                "tars": tars,
                "rows": rows,
                "samples_sharing_a_stem": shared[0],
                "shared_stems": shared[1],
            }
        )

    def datasets(self, catalog: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self._print([dict(r) for r in rows])

    def shards(self, dataset: str, shards: Sequence[ShardRow], *, all_states: bool) -> None:
        self._print([shard_doc(s) for s in shards])

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
        self._print({**doc, "groups": [dataclasses.asdict(g) for g in groups]})

    def sample(self, record: Record, *, raw_entry: str | None = None) -> None:
        # Raw bytes are for pipes: JSON describes the entry like any other.
        self._print(sample_doc(record))

    def samples(self, records: Sequence[Record], missing: Sequence[str]) -> None:
        self._print({"samples": [sample_doc(r) for r in records], "missing": list(missing)})

    def saved(
        self,
        folder: Path,
        files: Sequence[Mapping[str, Any]],
        samples: int,
        missing: Sequence[str],
    ) -> None:
        self._print({"saved": [dict(f) for f in files], "missing": list(missing)})

    def verify_progress(self, total: int) -> AbstractContextManager[VerifyProgressCallback | None]:
        return contextlib.nullcontext(None)

    def verify_report(self, dataset: str, report: CatalogReport) -> None:
        self._print(
            {
                "dataset": report.dataset,
                "ok": report.ok,
                "shards_checked": report.shards_checked,
                "records_checked": report.records_checked,
                "bytes_checked": report.bytes_checked,
                "quick": report.quick,
                "problems": [
                    {"shard": p.url, "kind": p.kind, "detail": p.message, "keys": list(p.keys)}
                    for p in report.problems
                ],
            }
        )

    def reindexed(self, dataset: str, rows: Sequence[ShardRow]) -> None:
        self._print(
            [
                {
                    "url": r.url,
                    "shard_number": r.shard_number,
                    "records": r.record_count,
                    "bytes": r.size_bytes,
                }
                for r in rows
            ]
        )

    def history_rebuilt(self, rebuilt: HistoryRebuild, rows: Sequence[ShardRow]) -> None:
        self._print(
            {
                "dataset": rebuilt.dataset,
                "root": rebuilt.root,
                "history": rebuilt.folder,
                "latest": rebuilt.latest,
                "versions": rebuilt.versions,
                "tags": rebuilt.tags,
                "shards": rebuilt.shards,
                "not_registered": rebuilt.gone,
                "unlisted": rebuilt.unlisted,
            }
        )

    def version_log(self, dataset: str, versions: Sequence[VersionInfo]) -> None:
        self._print(
            {
                "dataset": dataset,
                "versions": [
                    {**dataclasses.asdict(v), "created_at": timestamp(v.created_at)}
                    for v in versions
                ],
            }
        )

    def groups(self, dataset: str, groups: Sequence[GroupInfo]) -> None:
        self._print([dataclasses.asdict(g) for g in groups])

    def version_change(self, message: str, document: Mapping[str, Any]) -> None:
        self._print(dict(document))

    def version_diff(self, diff: VersionDiff) -> None:
        self._print(dataclasses.asdict(diff))

    def expired(self, result: ExpireResult, *, dry_run: bool) -> None:
        self._print({**dataclasses.asdict(result), "dry_run": dry_run})

    def gc_report(self, report: GcReport) -> None:
        self._print(dataclasses.asdict(report))

    def deleted(self, dataset: str, report: DeleteReport, *, shards: int, size: int) -> None:
        self._print(
            {
                "dataset": dataset,
                "shards": shards,
                "objects_removed": len(report.removed),
                "bytes": size,
                "kept": report.kept,
            }
        )

    def inspection(self, shard: ShardInspection) -> None:
        doc: dict[str, Any] = {
            "shard": shard.fields,
            "entry_kinds": shard.entry_kinds,
            "metadata": shard.metadata,
        }
        if shard.records is not None:
            doc["records"] = shard.records
        if shard.verified is not None:
            v = shard.verified
            doc["verified"] = {"ok": True, "records": v.records, "entries": v.entries}
        self._print(doc)

    def demo_report(self, report: DemoReport) -> None:
        # The catalog is shown masked already; the folder is --out as given.
        self._print({**report.__dict__, "root": redact_url(report.root)})

    def query_result(self, result: QueryRows) -> None:
        # One document, written row by row as the rows arrive: any number of rows in
        # bounded memory, and `truncated` (known at the end) inside the document.
        names = unique_columns(result.columns)
        out = sys.stdout
        out.write('{\n  "columns": ' + json.dumps(names, ensure_ascii=False) + ',\n  "rows": [')
        first = True
        for row in result:
            doc = dict(zip(names, (json_cell(v) for v in row)))
            out.write(("\n    " if first else ",\n    ") + _dumps(doc))
            first = False
        out.write(("]" if first else "\n  ]") + ",\n")
        tail = {
            "truncated": result.cut is not None,
            "cut": result.cut,
            "limit": result.limit or None,
            "max_bytes": result.max_bytes or None,
        }
        out.write(",\n".join(f"  {json.dumps(k)}: {_dumps(v)}" for k, v in tail.items()))
        out.write("\n}\n")
        out.flush()

    def keys(self, dataset: str, keys: Iterator[str]) -> None:
        # JSON Lines: one JSON string per line, as the keys arrive (any number of them).
        out = sys.stdout
        for key in keys:
            out.write(json.dumps(key, ensure_ascii=False) + "\n")
        out.flush()

    def key_count(self, dataset: str, prefix: str | None, count: int) -> None:
        self._print({"dataset": dataset, "prefix": prefix, "count": count})

    def catalog_upgraded(self, catalog: str, before: str | None, after: str | None) -> None:
        self._print({"catalog": catalog, "from": before, "to": after})

    def records_partitioned(self, catalog: str, before: int, after: int) -> None:
        self._print({"catalog": catalog, "partitions_before": before, "partitions": after})

    def catalog_revision(self, catalog: str, revision: str | None, head: str | None) -> None:
        self._print(
            {"catalog": catalog, "revision": revision, "head": head, "at_head": revision == head}
        )

    def readonly_role(self, catalog: str, role: ReadOnlyRole) -> None:
        self._print(
            {
                "catalog": catalog,
                "role": role.name,
                "schema": role.schema,
                "tables": list(role.tables),
                "created": role.created,
                "login": role.login,
                "granted_to": role.granted_to,
            }
        )
