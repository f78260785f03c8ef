"""Each kind of result, printed by the text and the JSON output (in process, exact values).

The subprocess tests (test_dataset_cmds.py, test_inspect.py) run the commands
end to end; these pin down what each output prints for results those tests
do not reach: reindex and gc tables, delete and write documents, catalog
revisions, SQL cells, and the stderr lines both outputs share.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from shardcat.catalog import CatalogReport, DatasetInfo, Problem, ShardRow
from shardcat.catalog.readonly import QueryStream, ReadOnlyRole
from shardcat.cli.output import (
    JsonOutput,
    Output,
    ShardInspection,
    TextOutput,
    output_for,
)
from shardcat.demo import DemoReport
from shardcat.format import Entry, Record, VerifyReport
from shardcat.orchestration import WriteProgressBar, WriteSummary
from shardcat.orchestration.gc import DeleteReport, GcReport

WHEN = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)


@pytest.fixture
def text(monkeypatch: pytest.MonkeyPatch) -> TextOutput:
    monkeypatch.setenv("COLUMNS", "200")  # read when the console is made
    monkeypatch.setenv("NO_COLOR", "1")
    return TextOutput()


@pytest.fixture
def js() -> JsonOutput:
    return JsonOutput()


def doc(capsys: pytest.CaptureFixture[str]) -> Any:
    captured = capsys.readouterr()
    assert captured.err == ""
    return json.loads(captured.out)


def shard(n: int, state: str = "committed", records: int = 1234) -> ShardRow:
    return ShardRow(
        id=n,
        dataset="pics",
        url=f"/data/pics-{n:03d}.shard",
        state=state,
        job_id=1,
        shard_number=n,
        record_count=records,
        size_bytes=2048,
        payload_bytes=1000,
        file_id="ab" * 16,
        format_version=(1, 0),
        created_at=WHEN,
        header_crc=0,
        data_crc=0,
        footer_crc=0,
    )


def test_the_output_option_chooses_the_output():
    assert isinstance(output_for("json"), JsonOutput) and output_for("json").name == "json"
    table, tsv = output_for("table"), output_for("tsv")
    assert isinstance(table, TextOutput) and not table.tsv
    assert isinstance(tsv, TextOutput) and tsv.tsv
    assert not hasattr(output_for("json"), "as_json")  # commands cannot branch on it
    with pytest.raises(ValueError, match="table, tsv or json"):
        output_for("yaml")


def rows_of(columns: list[str], rows: list[list[Any]], *, limit: int = 1000, max_bytes: int = 0):
    """The real QueryStream over rows in memory (what open_read_only yields for a cursor)."""
    pending = iter(rows)
    return QueryStream(
        tuple(columns),
        limit,
        max_bytes,
        lambda n: [r for r, _ in zip(pending, range(n))],
        lambda: None,
    )


# --- write ---------------------------------------------------------------------

SUMMARY = WriteSummary(
    dataset="pics",
    job_id=3,
    records=31,
    shards=["/d/pics-j3-000000-000.shard", "/d/pics-j3-000000-001.shard"],
    bytes=4_000_000,
    payload_bytes=3_000_000,
    seconds=2.0,
    partitions=1,
    shard_patterns=["/d/pics-j3-000000-{000..001}.shard"],
)


def test_write_summary(text, js, capsys):
    js.write_summary(SUMMARY)
    assert doc(capsys) == {
        "dataset": "pics",
        "job_id": 3,
        "records": 31,
        "shards": SUMMARY.shards,
        "bytes": 4_000_000,
        "payload_bytes": 3_000_000,
        "seconds": 2.0,
        "partitions": 1,
        "shard_patterns": SUMMARY.shard_patterns,
        "skipped_files": 0,
        "hidden_files": 0,
        "resumed_partitions": 0,
        "skipped_keys": 0,
        "skipped_duplicates": 0,
        "mb_per_s": 2.0,
    }
    text.write_summary(SUMMARY)
    assert capsys.readouterr().out == (
        "pics: job 3 committed 31 records in 2 shards (3.8 MiB) from 1 partition in 2.00 s "
        "(2 MB/s)\n  /d/pics-j3-000000-{000..001}.shard\n"
    )


def test_resumed_write_and_copy_summaries(text, js, capsys):
    from dataclasses import replace

    from shardcat.orchestration import CopySummary

    text.write_summary(replace(SUMMARY, resumed_partitions=1))
    assert "; resumed: 1 partitions were done before\n" in capsys.readouterr().out
    copy = CopySummary(
        dataset="pics-copy",
        source="/d",
        destination="s3://b/pics",
        job_id=4,
        shards=2,
        copied=1,
        records=31,
        bytes=4_000_000,
        moved=False,
        seconds=1.0,
        sources_left=[],
    )
    js.copy_summary(copy)
    assert doc(capsys)["copied"] == 1
    text.copy_summary(replace(copy, moved=True, sources_left=["/d/a.shard"]))
    assert capsys.readouterr().out == (
        "pics-copy: moved 2 shards (31 records, 4,000,000 bytes) to s3://b/pics in job 4; "
        "1 were there already and verified\n  not removed (no longer used: delete it): /d/a.shard\n"
    )


def test_progress_is_drawn_by_the_text_output_only(text, js):
    with js.write_progress() as none, js.verify_progress(3) as nothing:
        assert none is None and nothing is None
    with text.write_progress(enabled=False) as off:
        assert off is None
    with text.write_progress() as bar:
        assert isinstance(bar, WriteProgressBar)
    with text.verify_progress(2) as on_shard:
        assert on_shard is not None
        on_shard("/d/a.shard", 2)


# --- datasets ------------------------------------------------------------------


def test_datasets_empty_and_listed(text, js, capsys):
    text.datasets("sqlite:///c.db", [])
    out = capsys.readouterr().out
    assert "Datasets in sqlite:///c.db" in out
    assert out.endswith("no datasets yet: write one with `shardcat write SRC URL -d NAME`\n")
    row = {"name": "pics", "root": "/d", "shards": 2, "records": 12345, "bytes": 4096}
    row["created"] = "2024-01-02 03:04:05"
    js.datasets("sqlite:///c.db", [row])
    assert doc(capsys) == [row]
    text.datasets("sqlite:///c.db", [row])
    out = capsys.readouterr().out
    assert "12,345" in out and "4.0 KiB" in out and "no datasets yet" not in out


def test_shards_with_every_state(text, js, capsys):
    rows = [shard(0), shard(1), shard(2, "deleted", 7)]
    text.shards("pics", rows, all_states=True)
    out = capsys.readouterr().out
    assert out.startswith("Shards of pics\n") and "2024-01-02 03:04:05" in out
    assert out.endswith("3 shards (2 committed, 1 deleted): 2,468 committed records, 4.0 KiB\n")
    text.shards("pics", rows[:1], all_states=False)
    assert capsys.readouterr().out.startswith("Shards of pics (committed)\n")
    js.shards("pics", rows[:1], all_states=False)
    assert doc(capsys) == [
        {
            "url": "/data/pics-000.shard",
            "kind": "native",
            "state": "committed",
            "shard_number": 0,
            "job_id": 1,
            "records": 1234,
            "bytes": 2048,
            "payload_bytes": 1000,
            "created": "2024-01-02T03:04:05+00:00",
        }
    ]


def test_stats_of_an_empty_dataset(text, js, capsys):
    info = DatasetInfo(1, "pics", "/d", (1, 0), 0, {}, WHEN)
    js.dataset_stats(info, [], [])
    got = doc(capsys)
    assert got["shards"] == 0 and got["shard_bytes"] == {"min": None, "median": None, "max": None}
    text.dataset_stats(info, [], [])
    out = capsys.readouterr().out
    assert "- / - / -" in out and "Entry kinds" in out


def test_stats_piped_are_raw_numbers(monkeypatch, capsys):
    """TSV is for scripts: shard sizes in bytes, counts without separators (docs/CLI.md)."""
    monkeypatch.setenv("NO_COLOR", "1")
    tsv = TextOutput(tsv=True)
    info = DatasetInfo(1, "pics", "/d", (1, 0), 1, {}, WHEN)
    tsv.dataset_stats(info, [shard(0, records=1234), shard(1, records=2000)], [])
    rows = dict(
        line.split("\t", 1) for line in capsys.readouterr().out.splitlines() if "\t" in line
    )
    assert rows["shard size min / median / max"] == "2048 / 2048 / 2048"
    assert rows["records per shard min / median / max"].split(" / ")[::2] == ["1234", "2000"]
    assert rows["records"] == "3234" and "KiB" not in rows["bytes"]


# --- samples -------------------------------------------------------------------

RECORD = Record(
    "cats/img001",
    {
        "txt": Entry(b"a [bold]cat[/bold]\n", "text/plain"),
        "png": Entry(b"\x89PNG" + bytes(60), "image/png"),
    },
)


def test_samples_of_a_batch_and_what_is_missing(text, js, capsys):
    js.samples([RECORD], ["no/such"])
    assert doc(capsys) == {
        "samples": [
            {
                "key": "cats/img001",
                "entries": {
                    "txt": {
                        "content_type": "text/plain",
                        "bytes": 19,
                        "value": "a [bold]cat[/bold]\n",
                    },
                    "png": {"content_type": "image/png", "bytes": 64},
                },
            }
        ],
        "missing": ["no/such"],
    }
    text.samples([RECORD, RECORD], ["no/such"])
    out = capsys.readouterr().out
    assert out.count("Sample cats/img001") == 2
    assert "a [bold]cat[/bold]" in out and "<64 bytes image/png>" in out  # never markup


def test_one_entry_of_one_sample_is_raw_bytes_in_text_and_a_document_in_json(
    text, js, capsysbinary
):
    text.sample(RECORD, raw_entry="png")
    assert capsysbinary.readouterr().out == b"\x89PNG" + bytes(60)
    js.sample(RECORD, raw_entry="png")
    assert json.loads(capsysbinary.readouterr().out)["entries"]["png"]["bytes"] == 64


def test_raw_binary_is_refused_on_a_terminal(text, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    with pytest.raises(typer.Exit):
        text.sample(RECORD, raw_entry="png")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: entry of 'cats/img001' is 64 bytes of image/png;")


def test_saved_files(text, js, capsys):
    files = [{"key": "k", "entry": "txt", "path": "/o/k.txt", "bytes": 2048}]
    js.saved(Path("/o"), files, 1, ["gone"])
    assert doc(capsys) == {"saved": files, "missing": ["gone"]}
    text.saved(Path("/o"), files, 1, ["gone"])
    assert capsys.readouterr().out == "saved 1 file, 2.0 KiB, of 1 sample to /o\n"


# --- maintenance -------------------------------------------------------------------


def test_verify_reports(text, js, capsys):
    good = CatalogReport("pics", 2, 1234, 4096, [])
    text.verify_report("pics", good)
    assert capsys.readouterr().out == (
        "ok: dataset 'pics': 2 shards, 1,234 records, 4.0 KiB checked, no problems\n"
    )
    quick = CatalogReport("pics", 2, 1234, 256, [], quick=True)
    text.verify_report("pics", quick)
    assert capsys.readouterr().out == (
        "ok: dataset 'pics': 2 shards, 1,234 records, 256 B checked (quick: headers, trailers "
        "and row counts; no record read), no problems\n"
    )
    js.verify_report("pics", quick)
    assert doc(capsys)["quick"] is True
    problem = Problem("/d/a.shard", "corrupt", "CRC32C [mismatch]", ("k1",))
    bad = CatalogReport("pics", 2, 1000, 4096, [problem])
    js.verify_report("pics", bad)
    assert doc(capsys) == {
        "dataset": "pics",
        "ok": False,
        "shards_checked": 2,
        "records_checked": 1000,
        "bytes_checked": 4096,
        "quick": False,
        "problems": [
            {
                "shard": "/d/a.shard",
                "kind": "corrupt",
                "detail": "CRC32C [mismatch]",
                "keys": ["k1"],
            }
        ],
    }
    text.verify_report("pics", bad)
    out = capsys.readouterr().out
    assert "Problems in pics" in out and "CRC32C [mismatch]" in out
    assert out.endswith(
        "dataset 'pics': 2 shards, 1,000 records, 4.0 KiB checked; 1 problem in 1 shard\n"
    )


def test_reindexed_shards(text, js, capsys):
    rows = [shard(0), shard(1)]
    js.reindexed("pics", rows)
    assert doc(capsys) == [
        {"url": r.url, "shard_number": r.shard_number, "records": 1234, "bytes": 2048} for r in rows
    ]
    text.reindexed("pics", rows)
    out = capsys.readouterr().out
    assert out.startswith("Reindexed shards of pics\n") and "/data/pics-001.shard" in out
    assert out.endswith("2 shards, 2,468 records reindexed\n")


def test_gc_reports(text, js, capsys):
    report = GcReport(
        dry_run=False,
        aborted_jobs=[4],
        deleted_shards=["/d/x.shard"],
        orphans=["/d/y.partial"],
        kept=["/e/z.shard: outside the root"],
    )
    js.gc_report(report)
    assert doc(capsys) == {
        "dry_run": False,
        "aborted_jobs": [4],
        "deleted_shards": ["/d/x.shard"],
        "orphans": ["/d/y.partial"],
        "kept": ["/e/z.shard: outside the root"],
        "errors": [],
        "sizes": {},
        "reasons": {},
        "history_written": {},
    }
    text.gc_report(report)
    out = capsys.readouterr().out
    assert out.startswith("Removed\n")
    for what in ("aborted job", "deleted shard", "orphan file", "kept"):
        assert what in out
    assert out.endswith(str(report) + "\n")
    text.gc_report(GcReport(dry_run=True))  # nothing to do: no table, just the line
    assert capsys.readouterr().out == str(GcReport(dry_run=True)) + "\n"


def test_deleted_dataset(text, js, capsys):
    report = DeleteReport("pics", False, removed=["/d/a", "/d/b"], missing=["/d/c"], kept=[])
    js.deleted("pics", report, shards=3, size=4096)
    assert doc(capsys) == {
        "dataset": "pics",
        "shards": 3,
        "objects_removed": 2,
        "bytes": 4096,
        "kept": [],
    }
    text.deleted("pics", report, shards=3, size=4096)
    assert capsys.readouterr().out == (
        "deleted dataset 'pics': 2 shard object(s) removed (1 already gone, 0 kept) of its 3 "
        "(4.0 KiB in all)\n"
    )


# --- shard files -----------------------------------------------------------------------


def test_inspection_with_and_without_records(text, js, capsys):
    fields = {"path": "/d/a.shard", "size": 2048, "format": "1.0", "records": 2}
    kinds = [{"name": "txt", "content_type": "text/plain", "codec": "none", "count": 2, "bytes": 9}]
    listed = [{"index": 0, "key": "a", "offset": 64, "length": 40, "entries": ["txt"]}]
    verified = VerifyReport("/d/a.shard", 2, 2, 2048, 0)
    full = ShardInspection(fields, kinds, {"split": "train"}, listed, verified)
    js.inspection(full)
    assert doc(capsys) == {
        "shard": fields,
        "entry_kinds": kinds,
        "metadata": {"split": "train"},
        "records": listed,
        "verified": {"ok": True, "records": 2, "entries": 2},
    }
    bare = ShardInspection(fields, kinds, {}, None, None)
    js.inspection(bare)
    assert set(doc(capsys)) == {"shard", "entry_kinds", "metadata"}
    text.inspection(full)
    out = capsys.readouterr().out
    assert "2,048 B (2.0 KiB)" in out and "First 1 record" in out and "train" in out
    assert out.endswith("verified: 2 records, 2 entries, every CRC and padding byte checked\n")
    assert fields["size"] == 2048  # the text output formats a copy
    text.inspection(bare)
    out = capsys.readouterr().out
    assert "(none)" in out and "First" not in out and "verified" not in out


def test_demo_report_masks_the_roots_secret(text, js, capsys, monkeypatch):
    # The suggested command names the program as run (cli/invocation.py): here, `shardcat`.
    monkeypatch.setattr(sys, "argv", ["shardcat"])
    report = DemoReport(catalog="sqlite:///d/c.db", root="s3://user:hunter22@bucket/demo")
    js.demo_report(report)
    got = doc(capsys)
    assert "hunter22" not in got["root"] and got["catalog"] == "sqlite:///d/c.db"
    assert set(got) == set(report.__dict__)
    text.demo_report(report)
    out = capsys.readouterr().out
    assert out.endswith("try: shardcat --catalog sqlite:///d/c.db ls demo\n")


# --- the catalog -------------------------------------------------------------------------


def test_query_cells(text, js, capsys):
    when = dt.datetime(2020, 1, 2, 3, 4, 5)
    long = "x" * 5000
    row = [b"\x00\xff", bytes(40), when, 1.5, None, long]
    columns = ["small", "big", "d", "f", "n", "long"]
    js.query_result(rows_of(columns, [row]))
    assert doc(capsys) == {
        "columns": columns,
        "rows": [
            {
                "small": "00ff",
                "big": "00" * 40,
                "d": "2020-01-02T03:04:05",
                "f": 1.5,
                "n": None,
                "long": long,
            }
        ],
        "truncated": False,
        "cut": None,
        "limit": 1000,
        "max_bytes": None,
    }
    text.query_result(rows_of(columns, [row]))
    out = capsys.readouterr().out
    assert out.startswith("1 row\n")
    assert "00ff" in out and "<40 bytes>" in out and "2020-01-02T03:04:05" in out
    assert "(+904 characters; --json prints whole values)" in out


def test_catalog_revisions_and_roles(text, js, capsys):
    url = "postgresql+psycopg://u:***@h/db"
    js.catalog_upgraded(url, None, "0002")
    assert doc(capsys) == {"catalog": url, "from": None, "to": "0002"}
    text.catalog_upgraded(url, None, "0002")
    text.catalog_upgraded(url, "0002", "0002")
    assert capsys.readouterr().out == (
        f"catalog {url} upgraded from empty to revision 0002\n"
        f"catalog {url} is at revision 0002 already\n"
    )
    js.catalog_revision(url, "0001", "0002")
    assert doc(capsys) == {"catalog": url, "revision": "0001", "head": "0002", "at_head": False}
    for revision in (None, "0002", "0001"):
        text.catalog_revision(url, revision, "0002")
    assert capsys.readouterr().out.splitlines() == [
        f"none (catalog {url} has no schema; run `shardcat catalog upgrade`)",
        "0002 (head)",
        "0001 (this shardcat's head is 0002; run `shardcat catalog upgrade`)",
    ]
    role = ReadOnlyRole("reader", "public", ("datasets", "records"), True, False, "postgres")
    js.readonly_role(url, role)
    assert doc(capsys) == {
        "catalog": url,
        "role": "reader",
        "schema": "public",
        "tables": ["datasets", "records"],
        "created": True,
        "login": False,
        "granted_to": "postgres",
    }
    text.readonly_role(url, role)
    assert capsys.readouterr().out.splitlines() == [
        f"created role reader (NOLOGIN): SELECT on 2 catalog tables in schema public of {url}",
        "granted reader to postgres",
        'use it: shardcat sql --role reader "SELECT ..." (or SHARDCAT_SQL_ROLE=reader)',
    ]


# --- stderr: the same for every output -------------------------------------------------------


@pytest.mark.parametrize("output", [TextOutput, JsonOutput])
def test_errors_and_notes_go_to_stderr_as_data(output: type[Output], capsys):
    out = output()
    out.error("key '[bold]x[/bold]' not found")
    out.note("warning: [red]not markup[/red]")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "error: key '[bold]x[/bold]' not found\nwarning: [red]not markup[/red]\n"
    )


# --- sql: truncation in the document, streams without a limit -----------------------------


def test_a_truncated_json_result_says_so_in_the_document(js, capsys):
    js.query_result(rows_of(["n", "n"], [[i, -i] for i in range(5)], limit=3))
    got = doc(capsys)
    assert got["columns"] == ["n", "n_2"]  # a repeated name is not lost in the row objects
    assert got["rows"] == [{"n": 0, "n_2": 0}, {"n": 1, "n_2": -1}, {"n": 2, "n_2": -2}]
    assert (got["truncated"], got["cut"], got["limit"]) == (True, "limit", 3)

    js.query_result(rows_of(["s"], [["x" * 10]] * 4, limit=0, max_bytes=25))
    got = doc(capsys)
    assert len(got["rows"]) == 2 and (got["truncated"], got["cut"]) == (True, "max_bytes")
    assert got["limit"] is None and got["max_bytes"] == 25

    js.query_result(rows_of(["s"], [], limit=0))
    assert doc(capsys)["rows"] == []


def test_unlimited_rows_are_written_as_they_arrive(js, text, capsys, monkeypatch):
    """--limit 0: rows go out while the cursor is still being read, not after collecting."""
    fetched: list[int] = []
    written_before_last_fetch: list[str] = []

    def fetch(n: int) -> list[tuple[int]]:
        written_before_last_fetch.append(capsys.readouterr().out)
        start = len(fetched)
        batch = [(i,) for i in range(start, min(start + n, 5000))]
        fetched.extend(r[0] for r in batch)
        return batch

    for out in (js, TextOutput(tsv=True)):
        fetched.clear()
        written_before_last_fetch.clear()
        stream = QueryStream(("i",), 0, 0, fetch, lambda: None)
        out.query_result(stream)
        assert len(fetched) == 5000 and stream.rows == 5000 and stream.cut is None
        # The early batches were printed before the last fetch happened.
        assert sum(len(w) for w in written_before_last_fetch) > 0
        capsys.readouterr()


def test_tsv_rows_are_whole_and_escaped(capsys):
    tsv = TextOutput(tsv=True)
    long = "y" * 5000
    tsv.query_result(
        rows_of(["a", "b", "c"], [["tab\there", "line\nbreak\\", long], [None, b"\x01", 7]])
    )
    lines = capsys.readouterr().out.split("\n")
    assert lines[0] == "a\tb\tc"
    assert lines[1] == "tab\\there\tline\\nbreak\\\\\t" + long  # whole, not shortened
    assert lines[2] == "\t01\t7"
    assert lines[3:] == [""]


def test_tsv_tables_have_raw_numbers_and_summaries_on_stderr(capsys):
    tsv = TextOutput(tsv=True)
    tsv.shards("pics", [shard(1, records=1234567)], all_states=False)
    captured = capsys.readouterr()
    header, row, end = captured.out.split("\n")
    assert header == "url\tstate\trecords\tbytes\tcreated" and end == ""
    assert row.split("\t")[:4] == ["/data/pics-001.shard", "committed", "1234567", "2048"]
    assert "1,234,567 committed records" in captured.err


def test_keys_and_counts(text, js, capsys):
    js.keys("pics", iter(["a", "b\tc"]))
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == ["a", "b\tc"]
    text.keys("pics", iter(["a", "b\tc"]))
    assert capsys.readouterr().out == "a\nb\\tc\n"
    js.key_count("pics", "a/", 3)
    assert doc(capsys) == {"dataset": "pics", "prefix": "a/", "count": 3}
    text.key_count("pics", None, 3)
    assert capsys.readouterr().out == "3\n"


def test_a_jobs_task_bar_is_drawn_on_a_terminal_and_never_in_a_pipe_or_json(monkeypatch):
    """index-tar, taridx import, copy, compact: tasks done of all; --no-progress draws nothing."""
    import io

    from rich.console import Console

    import shardcat.cli.output.text as text_module

    screen = io.StringIO()
    terminal = Console(file=screen, force_terminal=True, width=100)
    monkeypatch.setattr(text_module, "err_console", terminal)
    with TextOutput().task_progress("indexing", "tars") as bar:
        assert bar is not None
        bar(0, 3)
        bar(3, 3)
        terminal.file.flush()
    assert "indexing" in screen.getvalue() and "3/3" in screen.getvalue()
    with TextOutput().task_progress("indexing", "tars", enabled=False) as off:
        assert off is None  # --no-progress
    with JsonOutput().task_progress("indexing", "tars") as doc:
        assert doc is None
    monkeypatch.setattr(text_module, "err_console", Console(file=io.StringIO()))  # a pipe
    with TextOutput().task_progress("indexing", "tars") as piped:
        assert piped is None
