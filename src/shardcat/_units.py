"""Human-readable sizes: parse "256MB", print 1.5 GiB.

Kept by hand although ``dask.utils.parse_bytes`` does the same: the format
and storage layers (``ShardWriter(max_bytes=...)``, codec limits) parse sizes
in the core install, which has no Dask (an optional extra), and one parser
for every layer means ``"256MB"`` is the same size everywhere.
``tests/test_units.py`` checks that both agree wherever Dask is installed.
(Durations are parsed by the CLI, also without Dask: ``cli/common.py``.)
"""

from __future__ import annotations

import re

__all__ = ["count_of", "format_bytes", "parse_size", "size_or_zero"]

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}


def parse_size(value: int | str) -> int:
    """Bytes from an int or a string such as ``"256MB"``, ``"1.5GiB"``, ``"64 kib"``."""
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"size must be positive, not {value}")
        return value
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", value)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"cannot read {value!r} as a size; write e.g. '256MB' or '1GiB'")
    size = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if size <= 0:
        raise ValueError(f"size must be positive, not {value!r}")
    return size


def size_or_zero(value: int | str) -> int:
    """A size setting where 0 means none or off: 0, or :func:`parse_size` of an int, a string
    of digits or a size such as ``"2GiB"``. Raises TypeError or ValueError otherwise."""
    if isinstance(value, bool):  # TOML's true is no size
        raise TypeError(f"not a size: {value!r}")
    if isinstance(value, str):
        value = value.strip()
        if value.isdecimal():
            value = int(value)
    return 0 if value == 0 else parse_size(value)


def format_bytes(n: float) -> str:
    """``1536`` → ``"1.5 KiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def count_of(n: int, noun: str) -> str:
    """``n`` with thousands separators and ``noun``, plural unless ``n`` is 1: ``"1 shard"``, ``"2,000 records"``."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"
