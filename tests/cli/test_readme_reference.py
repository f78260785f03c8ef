"""The CLI reference (docs/CLI.md) lists exactly the commands and options the real CLI has,
and is what scripts/cli_docs.py generates from the commands' --help."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from _forkrun import run_one

ROOT = Path(__file__).parents[2]
REFERENCE = ROOT / "docs" / "CLI.md"


def cli_help(*args: str, real: bool = False) -> str:
    """``shardcat ARGS --help``, forked from a process that imported shardcat once
    (tests/_forkrun.py); ``real``: through the installed script."""
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    p = run_one(*args, "--help", env=env, timeout=120, real=real)
    assert p.returncode == 0, p.stderr
    return p.stdout


def readme_reference() -> str:
    text = REFERENCE.read_text()
    section = text[text.index("## Global options") :]
    return section


def test_every_command_is_in_the_readme_and_every_readme_command_exists():
    section = readme_reference()
    # Command names may hold a hyphen (index-tar).
    documented = set(re.findall(r"^shardcat ([a-z][a-z-]*)", section, flags=re.M))
    # through the installed script, as a user runs it: what the forked runs stand for
    top = cli_help(real=True)
    listed = set(re.findall(r"^│ ([a-z][a-z-]*)\s", top, flags=re.M)) or set(
        re.findall(r"^\s{2}([a-z][a-z-]*)\s{2,}", top, flags=re.M)
    )
    assert listed, top
    assert documented == listed


def test_documented_options_exist():
    section = readme_reference()
    for command, options in {
        "write": [
            "--shard-size",
            "--compression",
            "--mode",
            "--key-rule",
            "--no-ext-entry",
            "--skip-unmatched",
            "--workers",
            "--scheduler",
            "--on-duplicate",
            "--message",
            "--job-name",
            "--resume",
            "--allow-changed-inputs",
        ],
        "copy": ["--to-catalog", "--as", "--move", "--dest-option", "--workers", "--scheduler"],
        "get": ["--keys-from", "--version"],
        "gc": ["--grace", "--stale-after", "--dry-run"],
        "sql": ["--limit", "--timeout", "--max-bytes", "--role"],
        "catalog": ["upgrade", "current", "partition", "create-readonly-role"],
        "demo": ["--out", "--samples", "--workers", "--scheduler"],
        "delete": ["--delete-tars"],
        "index-tar": ["--dataset", "--on-error", "--workers", "--scheduler"],
        "taridx": ["export", "import"],
        "log": [],
        "stats": ["--version"],
        "verify": ["--version"],
        "tag": ["--move"],
        "untag": [],
        "diff": ["--keys"],
        "delete-keys": ["--keys-from", "--missing-ok", "--message"],
        "expire": ["--keep-last", "--older-than", "--dry-run"],
        "compact": ["--min-live", "--shard-size", "--message", "--workers", "--scheduler"],
    }.items():
        text = cli_help(command)
        for option in options:
            assert option in text, f"{command} {option}"
    top = cli_help()
    for option in ("--catalog", "--config", "--storage-option", "--json", "--verbose"):
        assert option in top
        assert option in section or option.replace("--storage-option", "-S") in section


def test_the_reference_is_what_the_commands_help_says():
    """docs/CLI.md's generated part is current: after changing a command, run the script."""
    p = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "cli_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stdout + p.stderr
