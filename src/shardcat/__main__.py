"""``python -m shardcat``: the same as the ``shardcat`` command."""

from __future__ import annotations

from .cli.app import main

main()
