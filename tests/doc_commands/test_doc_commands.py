"""Every command in README.md and docs/*.md runs: shell blocks, and Python blocks, in order.

Each document runs in a temporary folder of its own, block after block, as a
reader would type them (``run_blocks.py``). The folder looks like a checkout
to the commands: ``.venv`` is this interpreter's environment and ``docs/``
a copy of the documents (``docs/tools/format_example.py --update`` rewrites
the copy). Blocks that cannot run in CI carry a ``<!-- not-tested: why -->``
marker; each one is reported as a warning, so none is skipped silently.
Blocks written for the reader's own servers carry a ``<!-- stand-ins: ... -->``
marker and run against local ones (``stand_ins.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from contextlib import ExitStack
from pathlib import Path

import pytest

from .blocks import ROOT, RUNNABLE, Block, blocks_of, documents, parse
from .stand_ins import StandIns, stand_ins

RUNNER = Path(__file__).with_name("run_blocks.py")
DOCUMENT_TIMEOUT = 600  # seconds for all blocks of one document


class NotTestedBlock(UserWarning):
    """A command block of the documentation that the tests do not run (its marker says why)."""


# --- the extraction ---------------------------------------------------------------------


def test_blocks_are_found_with_their_language_line_and_marker() -> None:
    text = """# Title

```bash
shardcat ls
```

<!-- not-tested: needs docker -->

~~~sh
docker compose up
~~~

- a list item:

  ```python
  x = 1
    # indented comment
  ```

````text
```python
not a block of its own
```
````
"""
    first, second, third, fourth = parse(text, ROOT / "X.md")
    assert (first.line, first.kind, first.text, first.not_tested, first.runs) == (
        3,
        "shell",
        "shardcat ls\n",
        None,
        True,
    )
    assert (second.line, second.lang, second.not_tested, second.runs) == (
        9,
        "sh",
        "needs docker",
        False,
    )
    assert (third.kind, third.text) == ("python", "x = 1\n  # indented comment\n")
    assert (fourth.lang, fourth.runs) == ("text", False)
    assert "```python" in fourth.text
    assert first.where == "X.md:3"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("```bash\nshardcat ls\n", "never closed"),
        ("<!-- not-tested: x -->\nsome prose\n```bash\nls\n```\n", "no block after it"),
        ("text\n<!-- not-tested: x -->\n", "no block after it"),
    ],
)
def test_broken_markdown_is_an_error_not_a_skip(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse(text, ROOT / "X.md")


# --- the documents' blocks ----------------------------------------------------------------


def _all_blocks() -> list[Block]:
    return [b for doc in documents() for b in blocks_of(doc)]


def test_every_fence_names_its_language() -> None:
    """A fence without a language could hide a command: say ``text`` for synopses and output."""
    unnamed = [b.where for b in _all_blocks() if not b.lang]
    assert not unnamed, f"fenced blocks without a language (use bash, python, text, ...): {unnamed}"


def test_markers_explain_and_mark_only_commands() -> None:
    for block in _all_blocks():
        marker = block.not_tested if block.not_tested is not None else block.stand_ins
        if marker is None:
            continue
        assert len(marker.split()) >= 2, f"{block.where}: say why, or what stands in"
        assert block.lang in RUNNABLE, (
            f"{block.where}: a marker on a {block.lang!r} block, which never runs"
        )


def test_stand_in_blocks_use_the_placeholders_the_stand_ins_replace() -> None:
    """A stand-ins block naming no placeholder would run against nothing it claims to."""
    placeholders = ("db.internal", "scheduler-host", "s3://your-bucket", "s3://raw/")
    for block in _all_blocks():
        if block.stand_ins is not None:
            assert any(p in block.text for p in placeholders), (
                f"{block.where}: a stand-ins block that names none of {placeholders}"
            )


def _workspace(tmp_path: Path) -> Path:
    """A folder like a checkout: ``.venv/bin`` runs this environment's commands, ``docs/`` a copy.

    ``.venv/bin`` holds wrappers, not a link to the environment: ``python3 -m
    venv .venv`` or ``pip install`` in an unmarked block fails here instead
    of changing the environment the tests run in (pip is left out on purpose).
    """
    work = tmp_path / "work"
    bin_dir = work / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    real_bin = Path(sys.executable).parent
    for command in real_bin.iterdir():
        if command.name.startswith(("pip", "activate", "Activate")) or not os.access(
            command, os.X_OK
        ):
            continue
        wrapper = bin_dir / command.name
        wrapper.write_text(f'#!/bin/sh\nexec "{command}" "$@"\n', encoding="utf-8")
        wrapper.chmod(0o755)
    shutil.copytree(ROOT / "docs", work / "docs")
    return work


@pytest.mark.slow
@pytest.mark.parametrize("document", documents(), ids=lambda p: p.name)
def test_the_documents_commands_run(
    document: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    blocks = [b for b in blocks_of(document) if b.kind != "text"]
    for block in blocks:
        if block.not_tested is not None:
            warnings.warn(
                f"{block.where} not tested: {block.not_tested}", NotTestedBlock, stacklevel=1
            )
    runs = [b for b in blocks if b.runs]
    if not runs:
        pytest.skip(f"{document.name} has no command blocks to run")
    with ExitStack() as stack:
        servers: StandIns | None = None
        if any(b.stand_ins is not None for b in runs):
            server = request.getfixturevalue("postgres_server")
            servers = stack.enter_context(stand_ins(server, tmp_path / "servers"))
        result = _run_blocks(runs, tmp_path, servers)
    assert result.returncode == 0, (
        f"{document.name}: a block failed\n--- stdout\n{result.stdout[-6000:]}\n"
        f"--- stderr\n{result.stderr[-6000:]}"
    )
    assert result.stdout.count("=== ok in") == len(runs), result.stdout


def _run_blocks(
    runs: list[Block], tmp_path: Path, servers: StandIns | None
) -> subprocess.CompletedProcess[str]:
    work = _workspace(tmp_path)
    blocks = [
        {
            "where": b.where,
            "line": b.line,
            "kind": b.kind,
            "text": servers.apply(b.text) if servers and b.stand_ins is not None else b.text,
        }
        for b in runs
    ]
    spec = tmp_path / "blocks.json"
    scheduler = servers.scheduler if servers else None
    spec.write_text(json.dumps({"blocks": blocks, "scheduler": scheduler}), encoding="utf-8")
    if servers:
        env = dict(servers.env)
        for name, data in servers.workspace_files.items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_bytes(data)
    else:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SHARDCAT_", "DASK_"))}
    env.update({"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb", "PYTHONUNBUFFERED": "1"})
    return subprocess.run(
        [sys.executable, str(RUNNER), str(spec)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=DOCUMENT_TIMEOUT,
        check=False,
    )
