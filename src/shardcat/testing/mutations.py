"""Deterministic damage for binary files: the bad inputs of the reliability suite.

:func:`mutations` turns one valid file into a stream of damaged copies, each
described by a :class:`Mutation` that says what was done where, so that a
failure found in a long run is reproduced from its seed and case number
alone. The kinds cover what storage and transfers do to files and what a
hostile writer would try:

* ``flip``: 1-4 bytes XORed with a random non-zero mask;
* ``truncate``: the file cut at any length (``tiny``: to 0-64 bytes);
* ``swap``: two equal regions exchanged; ``splice``: a region overwritten
  with bytes from elsewhere in the file or from another file;
* ``ff_run`` / ``zero_run``: 2, 4 or 8 bytes of 0xFF or 0x00 written at an
  aligned offset of a structured region (header, index, trailer: where the
  length, count and offset fields are), the classic way to make a reader
  allocate or loop on a length it trusted;
* ``insert`` / ``delete``: bytes added or removed, shifting everything after;
* ``garbage``: random bytes appended, or the whole file random.

Structured regions are given by the caller as ``(start, end)`` pairs (for a
shard: header, footer and trailer), so the same generator serves any format.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = ["KINDS", "Mutation", "mutate", "mutations"]

KINDS = (
    "flip",
    "truncate",
    "tiny",
    "swap",
    "splice",
    "ff_run",
    "zero_run",
    "insert",
    "delete",
    "garbage",
)


@dataclass(frozen=True, slots=True)
class Mutation:
    """One damaged copy: its case number, kind, and a description of what changed where."""

    case: int
    kind: str
    detail: str


def _region(rng: random.Random, size: int, max_len: int = 256) -> tuple[int, int]:
    length = rng.randint(1, max(1, min(max_len, size // 2)))
    start = rng.randrange(0, max(1, size - length + 1))
    return start, length


def mutate(
    data: bytes,
    kind: str,
    rng: random.Random,
    *,
    structured: Sequence[tuple[int, int]] = (),
    donor: bytes = b"",
) -> tuple[bytes, str]:
    """``data`` damaged by one mutation of ``kind``; returns the bytes and what was done."""
    size = len(data)
    b = bytearray(data)
    if kind == "flip":
        where = sorted(rng.randrange(size) for _ in range(rng.randint(1, 4)))
        for pos in where:
            b[pos] ^= rng.randint(1, 255)
        return bytes(b), f"bytes {where} flipped"
    if kind == "truncate":
        cut = rng.randrange(size)
        return data[:cut], f"cut to {cut} of {size} bytes"
    if kind == "tiny":
        cut = rng.randint(0, min(64, size))
        return data[:cut], f"cut to {cut} bytes"
    if kind == "swap":
        length = rng.randint(1, max(1, min(256, size // 4)))
        first = rng.randrange(0, size - 2 * length + 1)
        second = rng.randrange(first + length, size - length + 1)
        b[first : first + length], b[second : second + length] = (
            data[second : second + length],
            data[first : first + length],
        )
        return bytes(b), f"{length} bytes at {first} and {second} swapped"
    if kind == "splice":
        start, length = _region(rng, size)
        source = donor if donor and rng.random() < 0.5 else data
        origin = rng.randrange(0, max(1, len(source) - length + 1))
        piece = source[origin : origin + length]
        b[start : start + len(piece)] = piece
        whose = "another file" if source is donor else "the file"
        return bytes(b), f"{len(piece)} bytes at {start} overwritten from {whose} at {origin}"
    if kind in ("ff_run", "zero_run"):
        width = rng.choice((2, 4, 8))
        lo, hi = rng.choice(list(structured)) if structured else (0, size)
        hi = min(hi, size)
        slots = [p for p in range(lo - lo % width, hi - width + 1, width) if p >= lo]
        pos = rng.choice(slots) if slots else rng.randrange(max(1, size - width))
        fill = 0xFF if kind == "ff_run" else 0x00
        b[pos : pos + width] = bytes([fill]) * width
        return bytes(b[:size]), f"{width} bytes of {fill:#04x} at {pos}"
    if kind == "insert":
        pos = rng.randrange(size + 1)
        extra = rng.randbytes(rng.randint(1, 64))
        return data[:pos] + extra + data[pos:], f"{len(extra)} bytes inserted at {pos}"
    if kind == "delete":
        start, length = _region(rng, size, 64)
        return data[:start] + data[start + length :], f"{length} bytes deleted at {start}"
    if kind == "garbage":
        if rng.random() < 0.5:
            extra = rng.randbytes(rng.randint(1, 512))
            return data + extra, f"{len(extra)} random bytes appended"
        return rng.randbytes(size), f"{size} random bytes"
    raise ValueError(f"unknown mutation kind {kind!r}; one of {', '.join(KINDS)}")


def mutations(
    data: bytes,
    *,
    seed: int,
    count: int,
    start: int = 0,
    structured: Sequence[tuple[int, int]] = (),
    donor: bytes = b"",
    kinds: Sequence[str] = KINDS,
) -> Iterator[tuple[Mutation, bytes]]:
    """``count`` damaged copies of ``data``, cases ``start`` to ``start + count - 1``.

    Case ``i`` depends only on ``(seed, i)`` and the inputs: a long run can be
    cut into chunks (``start``) and any case replayed alone.
    """
    if len(data) < 16:
        raise ValueError("give a file of at least 16 bytes to damage")
    for case in range(start, start + count):
        rng = random.Random(f"{seed}:{case}")
        kind = kinds[case % len(kinds)]
        damaged, detail = mutate(data, kind, rng, structured=structured, donor=donor)
        yield Mutation(case, kind, detail), damaged
