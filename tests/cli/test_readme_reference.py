"""The README's CLI reference lists exactly the commands and options the real CLI has."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).parents[2] / "README.md"


def cli_help(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    p = subprocess.run(
        [sys.executable, "-m", "shardcat", *args, "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    return p.stdout


def readme_reference() -> str:
    text = README.read_text()
    section = text[text.index("## Command line") : text.index("## Documentation")]
    return section


def test_every_command_is_in_the_readme_and_every_readme_command_exists():
    section = readme_reference()
    # Command names may hold a hyphen (index-tar).
    documented = set(re.findall(r"^shardcat ([a-z][a-z-]*)", section, flags=re.M))
    listed = set(re.findall(r"^│ ([a-z][a-z-]*)\s", cli_help(), flags=re.M)) or set(
        re.findall(r"^\s{2}([a-z][a-z-]*)\s{2,}", cli_help(), flags=re.M)
    )
    assert listed, cli_help()
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
        ],
        "copy": ["--to-catalog", "--as", "--move", "--dest-option", "--workers", "--scheduler"],
        "get": ["--keys-from", "--version"],
        "gc": ["--grace", "--stale-after", "--dry-run"],
        "sql": ["--limit", "--timeout", "--max-bytes", "--role"],
        "catalog": ["upgrade", "current", "create-readonly-role"],
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
