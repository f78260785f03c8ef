"""What the commands print: an :class:`Output` per ``--output`` choice.

``base`` holds the interface (one method per kind of result), ``text`` the
rich tables and progress bars for people, ``documents`` the JSON documents
for programs.
"""

from __future__ import annotations

from .base import Output, ShardInspection, VerifyProgressCallback, err_console
from .documents import JsonOutput, timestamp
from .text import TextOutput

__all__ = [
    "JsonOutput",
    "Output",
    "ShardInspection",
    "TextOutput",
    "VerifyProgressCallback",
    "err_console",
    "output_for",
    "timestamp",
]


def output_for(name: str) -> Output:
    """The output ``--output`` (or ``--json``) chose: ``table``, ``tsv`` or ``json``.

    Raises
    ------
    ValueError
        If ``name`` is none of these.
    """
    if name == "json":
        return JsonOutput()
    if name in ("table", "tsv"):
        return TextOutput(tsv=name == "tsv")
    raise ValueError(f"unknown output {name!r}: use table, tsv or json")
