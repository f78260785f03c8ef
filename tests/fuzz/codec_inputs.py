"""Inputs for the record codec's differential fuzzer: records, damaged records, foreign bytes.

Every generator takes a :class:`random.Random` and nothing else, so a case is
replayed from its seed alone. Records are made by the reference encoder
(``records.encode_record``); damage is applied to their bytes, sometimes with
the head CRC (and payload CRCs) recomputed afterwards, so that checks behind
the CRCs (layout, lengths, text) are reached too, not only the CRC itself.
"""

from __future__ import annotations

import os
import random
import struct
from collections.abc import Iterator, MutableMapping
from typing import Any

import xxhash

from shardcat.format import records
from shardcat.format.checksums import crc32c
from shardcat.format.records import PreparedEntry
from shardcat.format.spec import ALIGNMENTS, Codec

__all__ = [
    "Case",
    "cases",
    "encoded",
    "entries",
    "foreign",
    "mutate",
    "payload",
    "reseal",
    "sample",
    "text",
]

SEED = int(os.environ.get("SHARDCAT_FUZZ_SEED", "30"))
"""The run's seed; every case's generator is derived from it, the fuzzer's name and the case number."""
EXAMPLES = int(os.environ.get("SHARDCAT_FUZZ_EXAMPLES", "0") or 0)
"""Cases per fuzzer (0: each fuzzer's own bounded count, for the test command)."""
START = int(os.environ.get("SHARDCAT_FUZZ_START", "0") or 0)
"""The first case number (to replay one failure: its number, and SHARDCAT_FUZZ_EXAMPLES=1)."""


class Case(random.Random):
    """A case's generator; ``str(case)`` says how to replay it."""

    def __new__(cls, name: str, number: int) -> Case:
        # Python 3.10's Random.__new__ takes at most the seed, even for a subclass.
        return super().__new__(cls)

    def __init__(self, name: str, number: int) -> None:
        super().__init__(f"{SEED}/{name}/{number}")
        self.name, self.number = name, number

    def __repr__(self) -> str:
        return (
            f"{self.name} case {self.number} (replay: SHARDCAT_FUZZ_SEED={SEED} "
            f"SHARDCAT_FUZZ_START={self.number} SHARDCAT_FUZZ_EXAMPLES=1)"
        )


def cases(name: str, default: int, tally: MutableMapping[str, int]) -> Iterator[Case]:
    """The cases of fuzzer ``name``: ``default`` of them, or SHARDCAT_FUZZ_EXAMPLES (counted in ``tally``)."""
    for number in range(START, START + (EXAMPLES or default)):
        tally["cases"] += 1
        yield Case(name, number)


def text(rng: random.Random, lo: int = 1, hi: int = 12, *, ascii_only: bool = False) -> str:
    """Text of ``lo``..``hi`` characters: mostly ASCII, sometimes any code point but surrogates."""
    n = rng.randint(lo, hi)
    if ascii_only or rng.random() < 0.7:
        return "".join(chr(rng.randint(32, 126)) for _ in range(n))
    out = []
    for _ in range(n):
        c = rng.choice([rng.randint(32, 126), rng.randint(0xA0, 0x7FF), rng.randint(0x800, 0xFFFF)])
        out.append(chr(c if not 0xD800 <= c < 0xE000 else 0x41))
    return "".join(out)


def payload(rng: random.Random) -> bytes:
    """Mostly small; sometimes past the compiled encoder's join limit (64 KiB); rarely past
    the size whose CRC runs without the GIL (1 MiB)."""
    r = rng.random()
    if r < 0.005:
        n = rng.randint(1 << 20, (1 << 20) + 5000)
    elif r < 0.03:
        n = rng.randint(60_000, 80_000)
    else:
        n = rng.choice([0, rng.randint(0, 40), rng.randint(0, 600)])
    return rng.randbytes(n) if n < 4096 else bytes(range(256)) * (n // 256) + rng.randbytes(n % 256)


def entries(rng: random.Random, max_entries: int = 5) -> list[PreparedEntry]:
    """Prepared entries: names repeat across cases (so layouts are cached), codecs mostly NONE."""
    out = []
    for _ in range(rng.randint(0, max_entries)):
        data = payload(rng)
        name = rng.choice(["jpg", "json", "cls", "txt", text(rng)])
        ctype = rng.choice(["image/jpeg", "application/json", text(rng, 1, 20, ascii_only=True)])
        codec = Codec(rng.choice([0, 0, 0, 1, 2, 7]))
        kind = rng.choice([bytes, bytes, bytearray, memoryview])
        out.append(PreparedEntry(name.encode(), ctype.encode(), codec, kind(data), crc32c(data)))
    return out


def encoded(rng: random.Random, alignment: int | None = None) -> tuple[bytes, int, str]:
    """A valid record's bytes, its alignment and its key."""
    key = rng.choice([f"k/{rng.randint(0, 999):03d}", text(rng, 0, 30)])
    alignment = alignment or rng.choice(ALIGNMENTS[:6] if rng.random() < 0.9 else ALIGNMENTS)
    raw = key.encode()
    rec = records.encode_record(raw, xxhash.xxh64_intdigest(raw), entries(rng), alignment)
    return b"".join(bytes(p) for p in rec.parts), alignment, key


def reseal(data: bytearray, payloads: bool = False) -> None:
    """Recompute the head CRC (and with ``payloads`` each in-range payload's CRC) in place."""
    if len(data) < 32:
        return
    head_length = int.from_bytes(data[24:28], "little")
    n = int.from_bytes(data[30:32], "little")
    if payloads:
        for i in range(n):
            at = 32 + 32 * i
            if at + 32 > min(head_length, len(data)):
                break
            p_off, size = struct.unpack_from("<QQ", data, at)
            if p_off + size <= len(data):
                data[at + 16 : at + 20] = crc32c(bytes(data[p_off : p_off + size])).to_bytes(
                    4, "little"
                )
    if 8 <= head_length <= len(data):
        data[4:8] = crc32c(bytes(data[8:head_length])).to_bytes(4, "little")


# Fields of the head and of a descriptor: (offset, width) pairs, damaged most often.
_HEAD_FIELDS = [(0, 4), (8, 8), (16, 8), (24, 4), (28, 2), (30, 2)]
_DESC_FIELDS = [(0, 8), (8, 8), (16, 4), (20, 2), (22, 2), (24, 1), (25, 7)]


def _field_value(rng: random.Random, width: int, old: int) -> int:
    top = (1 << (8 * width)) - 1
    return (
        rng.choice(
            [
                0,
                1,
                top,
                top >> 1,
                old + 1,
                max(old - 1, 0),
                old + 8,
                max(old - 8, 0),
                old * 2,
                rng.randint(0, top),
            ]
        )
        & top
    )


def mutate(rng: random.Random, data: bytes, other: bytes = b"") -> bytes:
    """``data`` damaged 1-3 ways; half the time resealed so deeper checks are reached."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(
            ["flip", "set", "cut", "extend", "head", "head", "desc", "desc", "splice", "zero"]
        )
        if kind == "flip" and out:
            i = rng.randrange(len(out))
            out[i] ^= 1 << rng.randrange(8)
        elif kind == "set" and out:
            out[rng.randrange(len(out))] = rng.randrange(256)
        elif kind == "cut":
            del out[rng.randint(0, len(out)) :]
        elif kind == "extend":
            out += rng.randbytes(rng.randint(1, 80))
        elif kind in ("head", "desc") and len(out) >= 32:
            n = int.from_bytes(out[30:32], "little")
            base = 0 if kind == "head" or not n else 32 + 32 * rng.randrange(min(n, 8))
            at, width = rng.choice(_HEAD_FIELDS if kind == "head" else _DESC_FIELDS)
            if base + at + width <= len(out):
                old = int.from_bytes(out[base + at : base + at + width], "little")
                new = _field_value(rng, width, old)
                out[base + at : base + at + width] = new.to_bytes(width, "little")
        elif kind == "splice" and other and out:
            start, n = rng.randrange(len(out)), rng.randint(1, 64)
            src = rng.randrange(len(other))
            out[start : start + n] = other[src : src + n]
        elif kind == "zero" and out:
            start = rng.randrange(len(out))
            out[start : start + rng.randint(1, 16)] = bytes(min(16, len(out) - start))
    if rng.random() < 0.5:
        reseal(out, payloads=rng.random() < 0.5)
    return bytes(out)


def foreign(rng: random.Random) -> bytes:
    """Bytes that were never a record: random, or random after a record tag."""
    data = rng.randbytes(rng.choice([0, rng.randint(1, 40), rng.randint(0, 600)]))
    return b"REC\0" + data if rng.random() < 0.5 else data


def sample(rng: random.Random) -> tuple[bytes, int, str, str]:
    """One case's record bytes: ``(bytes, alignment, key, how)``, ``how`` in valid, damaged, foreign."""
    data, alignment, key = encoded(rng)
    r = rng.random()
    if r < 0.35:
        return data, alignment, key, "valid"
    if r < 0.9:
        other = encoded(rng, alignment)[0]
        return mutate(rng, data, other), alignment, key, "damaged"
    return foreign(rng), alignment, key, "foreign"


def view_of(rng: random.Random, data: bytes) -> Any:
    """``data`` as a caller might pass it: mostly a read-only memoryview; sometimes writable,
    a read-only view of a bytearray, bytes, a released view, a view with another format, or
    a strided one."""
    r = rng.random()
    if r < 0.7:
        return memoryview(data)
    if r < 0.8:
        return memoryview(bytearray(data))
    if r < 0.88:
        return memoryview(bytearray(data)).toreadonly()
    if r < 0.93:
        return data
    if r < 0.95:  # released by its owner: the bytes are gone (the reference raises ValueError)
        view = memoryview(bytes(bytearray(data)))
        view.release()
        return view
    if r < 0.97 and len(data) % 4 == 0:
        return memoryview(data).cast("I")
    return memoryview(data + data)[::2] if rng.random() < 0.5 else memoryview(data).cast("c")
