"""What the commands print: an :class:`Output` per ``--json`` choice.

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


def output_for(as_json: bool) -> Output:
    """The output ``--json`` chose: :class:`JsonOutput` if set, else :class:`TextOutput`."""
    return JsonOutput() if as_json else TextOutput()
