"""The fenced code blocks of the Markdown documents, and which of them are commands to run.

A block is run when its language is a shell (``bash``, ``sh``, ``shell``,
``console``) or ``python``, unless the line before its opening fence (blank
lines aside) is a marker saying why it cannot run in CI::

    <!-- not-tested: needs docker -->
    ```bash
    docker compose up --build demo
    ```

A block written for the reader's own servers (``db.internal``,
``s3://your-bucket``, ``scheduler-host``) runs against local stand-ins
instead when it carries the other marker, which says what stands in::

    <!-- stand-ins: local PostgreSQL, moto and dask scheduler -->

The test replaces the placeholders (``test_doc_commands.STAND_INS``) in the
block's text with the addresses of real servers it started.

Every other language (``text`` for synopses and output, ``sql``, ``yaml``,
``toml``, diagrams) is reading matter; a fence without a language is an
error, so that nothing that looks like a command escapes by accident.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELL = frozenset({"bash", "sh", "shell", "console"})
PYTHON = frozenset({"python", "py"})
RUNNABLE = SHELL | PYTHON

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>not-tested|stand-ins):(?P<reason>.*?)-->\s*$")


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced block: where it starts (the opening fence's 1-based line), its language and text."""

    path: Path
    line: int
    lang: str
    text: str
    not_tested: str | None  # the not-tested marker's reason, if the block is marked
    stand_ins: str | None = None  # the stand-ins marker's text: runs with placeholders replaced

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path}:{self.line}"

    @property
    def kind(self) -> str:
        """``"shell"``, ``"python"`` or ``"text"`` (anything not run)."""
        if self.lang in SHELL:
            return "shell"
        if self.lang in PYTHON:
            return "python"
        return "text"

    @property
    def runs(self) -> bool:
        return self.kind != "text" and self.not_tested is None


def documents() -> list[Path]:
    """README.md and every document under docs/: whatever they hold when the tests run."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def parse(text: str, path: Path) -> list[Block]:
    """The fenced blocks of Markdown ``text``, in order.

    Raises
    ------
    ValueError
        A fence is never closed, or a marker is not followed by a block.
    """
    lines = text.splitlines()
    blocks: list[Block] = []
    pending: tuple[int, str, str] | None = (
        None  # a marker's line, kind and text, awaiting its block
    )
    i = 0
    while i < len(lines):
        line = lines[i]
        marker = _MARKER.match(line)
        if marker:
            if pending is not None:
                raise ValueError(f"{path}:{pending[0]}: a marker with no block after it")
            pending = (i + 1, marker.group("kind"), marker.group("reason").strip())
            i += 1
            continue
        fence = _FENCE.match(line)
        if not fence:
            if line.strip() and pending is not None:
                raise ValueError(f"{path}:{pending[0]}: a marker with no block after it")
            i += 1
            continue
        opening, indent = fence.group("fence"), fence.group("indent")
        lang = fence.group("info").strip().split(" ")[0].lower()
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            close = _FENCE.match(lines[j])
            if (
                close
                and close.group("fence")[0] == opening[0]
                and len(close.group("fence")) >= len(opening)
                and not close.group("info").strip()
            ):
                break
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        else:
            raise ValueError(f"{path}:{i + 1}: a code fence that is never closed")
        text = textwrap.dedent("\n".join(body)) + "\n"
        reason = pending[2] if pending is not None and pending[1] == "not-tested" else None
        stand_ins = pending[2] if pending is not None and pending[1] == "stand-ins" else None
        blocks.append(Block(path, i + 1, lang, text, reason, stand_ins))
        pending = None
        i = j + 1
    if pending is not None:
        raise ValueError(f"{path}:{pending[0]}: a marker with no block after it")
    return blocks


def blocks_of(path: Path) -> list[Block]:
    return parse(path.read_text(encoding="utf-8"), path)
