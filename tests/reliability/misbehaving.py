"""A bad-input subject whose read paths misbehave on purpose, one way per case.

It proves that the harness of ``shardcat.testing.badinput`` catches what it
is meant to catch: wrong data, untyped errors, hangs, crashes and runaway
allocations (the worker's address space is capped).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shardcat.errors import FormatError
from shardcat.testing.mutations import Mutation

BEHAVIOURS = ("refuse", "serve", "wrong", "untyped", "hang", "crash", "allocate", "serve")


class Misbehaving:
    name = "misbehaving"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir

    def cases(self, seed: int, start: int, count: int) -> Iterator[tuple[Any, bytes, int]]:
        for case in range(start, start + count):
            kind = BEHAVIOURS[case % len(BEHAVIOURS)]
            yield Mutation(case, kind, f"behaves: {kind}"), b"", 0

    def run(self, damaged: bytes, which: int, case: int, judge: Any) -> None:
        kind = BEHAVIOURS[case % len(BEHAVIOURS)]

        def read() -> bytes:
            if kind == "refuse":
                raise FormatError("damaged.shard: a typed refusal")
            if kind == "wrong":
                return b"not what was written"
            if kind == "untyped":
                raise KeyError("a bug")
            if kind == "hang":
                time.sleep(60)
            if kind == "crash":
                os._exit(3)
            if kind == "allocate":
                return bytes(3 << 30)  # over the 2 GiB cap: MemoryError
            return b"payload"

        judge.check("read", read, want=b"payload")
