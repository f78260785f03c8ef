"""How the user ran shardcat, so that the commands it suggests can be pasted as they are."""

from __future__ import annotations

import os
import shutil
import sys

__all__ = ["command_name"]


def command_name() -> str:
    """``shardcat`` when that name on the PATH runs this program, else the path it was run by.

    A fresh checkout runs ``.venv/bin/shardcat`` without activating the venv:
    a suggested ``shardcat ls`` would fail there (or run another install).
    ``python -m shardcat`` is suggested as that.
    """
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "__main__.py":
        return f"{os.path.basename(sys.executable)} -m shardcat"
    if os.path.basename(argv0) != "shardcat":
        return "shardcat"
    found = shutil.which("shardcat")
    if found is not None and os.path.realpath(found) == os.path.realpath(argv0):
        return "shardcat"
    return argv0
