"""``shardcat update-fields``: declared fields' values set at a new version (docs/TRAINING.md).

The command reads the values from a file and declares ``--field`` fields;
the version is :meth:`Catalog.update_fields`.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from .._units import count_of
from .common import open_catalog, parse_fields, state_of
from .groups_cmds import OnMissing
from .write_cmd import MessageOption

__all__ = ["read_values", "register"]

DatasetArg = Annotated[str, typer.Argument(help="The dataset's name.", metavar="DATASET")]


def register(app: typer.Typer) -> None:
    app.command("update-fields")(update_fields)


def update_fields(
    ctx: typer.Context,
    dataset: DatasetArg,
    values_from: Annotated[
        str,
        typer.Argument(
            help='The values: JSON lines ({"key": ..., FIELD: value, ...}) or, for a .csv '
            "file, CSV with a key column (- for JSON lines on stdin).",
            metavar="FILE",
        ),
    ],
    field: Annotated[
        list[str] | None,
        typer.Option(
            "--field",
            help="Declare a field first, NAME:TYPE (int, float, bool, str); repeatable.",
            metavar="NAME:TYPE",
        ),
    ] = None,
    csv_format: Annotated[
        bool, typer.Option("--csv", help="FILE is CSV whatever its name (- : stdin).")
    ] = False,
    on_missing: Annotated[
        OnMissing,
        typer.Option(help="A key the dataset does not have: error (naming some), or skip it."),
    ] = OnMissing.error,
    message: MessageOption = None,
) -> None:
    """Set declared fields' values of samples in a new version (no shard is written).

    Older versions keep the values they had (where= with version= reads them).
    A null value (JSON) or an empty cell (CSV) unsets the field.
    """
    from ..catalog import kind_of

    declare = parse_fields(field) or {}
    text = sys.stdin.read() if values_from == "-" else _read_file(values_from)
    text = text.removeprefix("\ufeff")  # the byte order mark spreadsheets put before a CSV
    as_csv = csv_format or values_from.lower().endswith(".csv")
    state = state_of(ctx)
    with open_catalog(state) as cat:
        # Declared with the update, in its transaction: a refused update declares nothing.
        # A field declared before keeps its kind here; declaring it anew as another fails there.
        kinds = {**{n: kind_of(t) for n, t in declare.items()}, **cat.fields(dataset)}
        values = read_values(text, values_from, kinds, as_csv=as_csv)
        done = cat.update_fields(
            dataset,
            values,
            message=message,
            on_missing="skip" if on_missing is OnMissing.skip else "error",
            declare=declare or None,
        )
    skipped = f", skipped {count_of(done.skipped, 'unknown key')}" if done.skipped else ""
    unset = f", unset {done.unset}" if done.unset else ""
    state.out.version_change(
        f"{dataset}: version {done.version} sets {count_of(done.values, 'value')} of "
        f"{count_of(done.keys, 'key')} ({', '.join(done.fields) or 'no field'}){unset}{skipped}",
        {
            "dataset": dataset,
            "version": done.version,
            "keys": done.keys,
            "values": done.values,
            "unset": done.unset,
            "skipped": done.skipped,
            "fields": list(done.fields),
        },
    )


def read_values(
    text: str, source: str, kinds: Mapping[str, str], *, as_csv: bool
) -> list[tuple[str, dict[str, Any]]]:
    """``(key, {field: value})`` of each line: JSON objects, or CSV rows typed by ``kinds``.

    Raises
    ------
    typer.BadParameter
        A line that is not a JSON object with a string ``key``, a CSV file
        without a ``key`` column, a CSV row with fewer or more cells than
        its header, or a CSV cell that is not a number where its field
        holds numbers.
    """
    out: list[tuple[str, dict[str, Any]]] = []
    if as_csv:
        reader = csv.DictReader(io.StringIO(text))
        if reader.fieldnames is None or "key" not in reader.fieldnames:
            raise typer.BadParameter(
                f"{source}: a CSV file of values has a header with a key column "
                f"(found: {', '.join(reader.fieldnames or []) or 'no header'})",
                param_hint="FILE",
            )
        for row in reader:
            n = reader.line_num
            _check_cells(row, len(reader.fieldnames), source, n)
            values = {
                name: _cell(name, cell, kinds.get(name), source, n)
                for name, cell in row.items()
                if name != "key"
            }
            out.append((row["key"], values))
        return out
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise typer.BadParameter(
                f"{source} line {n} is not JSON ({e.msg}); give one object a line",
                param_hint="FILE",
            ) from None
        if not isinstance(obj, dict) or not isinstance(obj.get("key"), str):
            raise typer.BadParameter(
                f'{source} line {n} is not a JSON object with a string "key": {line[:80]!r}',
                param_hint="FILE",
            )
        key = obj.pop("key")
        out.append((key, obj))
    return out


def _read_file(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise typer.BadParameter(f"{path}: {e.strerror or e}", param_hint="FILE") from None


def _check_cells(row: Mapping[str | None, Any], columns: int, source: str, line: int) -> None:
    """A row with fewer or more cells than the header: refused (a short row would unset)."""
    extra = row.get(None) or []
    missing = sum(1 for name, cell in row.items() if name is not None and cell is None)
    if extra or missing:
        cells = columns - missing + len(extra)
        raise typer.BadParameter(
            f"{source} line {line} has {count_of(cells, 'cell')}, the header {columns}; give "
            "every row one cell per column (an empty cell unsets the field)",
            param_hint="FILE",
        )


def _cell(name: str, cell: str | None, kind: str | None, source: str, line: int) -> Any:
    """A CSV cell as its field's value: a number for a number field; empty: None (unset)."""
    if cell is None or cell == "":
        return None
    if kind != "number":
        return cell  # text, or a field not declared (update_fields names it)
    lowered = cell.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return float(cell)
    except ValueError:
        raise typer.BadParameter(
            f"{source} line {line}: field {name!r} holds numbers, not {cell!r}", param_hint="FILE"
        ) from None
