"""Printing for the CLI: rich tables for people, JSON for programs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["Output", "err_console"]

# soft_wrap: an error is one line, whatever the terminal width (logs, grep).
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


class Output:
    """Writes tables and values as text (rich) or JSON, as ``--json`` chose."""

    def __init__(self, as_json: bool = False) -> None:
        self.as_json = as_json
        self.console = Console(highlight=False, soft_wrap=True)

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        if self.as_json:
            self.json([dict(zip(columns, row)) for row in rows])
            return
        t = Table(title=Text(title, style="table.title"), title_justify="left", show_lines=False)
        for c in columns:
            t.add_column(c, overflow="fold")
        for row in rows:
            # Text, not str: values are data (keys, URLs), never rich markup.
            t.add_row(*(Text("" if v is None else str(v)) for v in row))
        self.console.print(t)

    def fields(self, title: str, values: dict[str, Any]) -> None:
        """A two-column table of name → value."""
        if self.as_json:
            self.json(values)
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

    def json(self, value: Any) -> None:
        print(json.dumps(value, indent=2, ensure_ascii=False, default=str))

    def line(self, text: str, *, markup: bool = True) -> None:
        """A line of text (nothing with ``--json``); ``markup=False`` for lines made of data."""
        if not self.as_json:
            self.console.print(text, markup=markup)
