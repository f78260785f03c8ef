"""The compiled grouping (``_ctar.Grouper`` over ``walk_block``) against the Python reference.

Random tars: GNU, PAX and ustar headers, long names, directories and links,
names off WebDataset's plain path, samples split across chunk boundaries,
non-adjacent and duplicate members, then truncated or bit-flipped copies.
Both walkers must give the same rows byte for byte, or the same error (type,
message, path, offset).
"""

from __future__ import annotations

import io
import tarfile
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardcat.errors import ShardcatError
from shardcat.format.spec import ENTRY_ROW_DTYPE, MAX_ENTRIES, MAX_KEY_BYTES, RECORD_ROW_DTYPE
from shardcat.format.tar import iter_tar_samples, scan_tar, tarwalker
from shardcat.format.tar.errors import SplitSampleError, TarMemberNameError

from .helpers import error_fields, make_tar

ctar: Any = pytest.importorskip("shardcat.format.tar._ctar")

FORMATS = {"gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT, "ustar": tarfile.USTAR_FORMAT}


def test_the_c_limits_and_row_sizes_match_the_python_ones():
    assert (ctar.MAX_KEY_BYTES, ctar.MAX_ENTRIES) == (MAX_KEY_BYTES, MAX_ENTRIES)
    assert RECORD_ROW_DTYPE.itemsize == ctar.RECORD_ROW_SIZE
    assert ENTRY_ROW_DTYPE.itemsize == ctar.ENTRY_ROW_SIZE


def _result(data: bytes, walker: str, **kwargs: Any) -> Any:
    """scan_tar's summary and iter_tar_samples' samples, or the error's fields."""
    previous = tarwalker.use(walker)
    try:
        info = scan_tar(io.BytesIO(data), "mem.tar", **kwargs)
        samples = list(iter_tar_samples(io.BytesIO(data), "mem.tar", **kwargs))
    except ShardcatError as e:
        return error_fields(e)
    finally:
        tarwalker.use(previous)
    return (
        info.keys,
        info.records.tobytes(),
        info.entries.tobytes(),
        [(s.name, s.content_type, s.codec) for s in info.specs],
        info.size,
        info.end_offset,
        info.member_count,
        info.skipped,
        samples,
    )


def _same(data: bytes, **kwargs: Any) -> Any:
    compiled = _result(data, "compiled", **kwargs)
    assert compiled == _result(data, "python", **kwargs)
    return compiled


# Names: mostly plain WebDataset members, with every rare case mixed in.
_dirs = st.sampled_from(["", "d/", "a.b/", "x" * 120 + "/", "é/"])
_stems = st.sampled_from(["0001", "0002", "0003", "Key", "k.v", "_u", "__meta__", "ü"])
_exts = st.sampled_from(["jpg", "JPG", "cls", "seg.png", "", "txt\n", "Ä"])


@st.composite
def _members(draw: st.DrawFn) -> list[tuple[str, bytes]]:
    out = []
    for _ in range(draw(st.integers(1, 14))):
        d, stem, ext = draw(_dirs), draw(_stems), draw(_exts)
        name = f"{d}{stem}.{ext}" if draw(st.booleans()) or not ext else f"{d}{stem}"
        out.append((name, draw(st.binary(max_size=1500))))
    return out


def _extras(kinds: list[str]) -> list[tarfile.TarInfo]:
    out = []
    for i, kind in enumerate(kinds):
        info = tarfile.TarInfo(f"z/{i}" + ("/" if kind == "dir" else ""))
        info.type = {"dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "fifo": tarfile.FIFOTYPE}[kind]
        info.linkname = "z/x" if kind == "sym" else ""
        out.append(info)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    members=_members(),
    fmt=st.sampled_from(sorted(FORMATS)),
    extras=st.lists(st.sampled_from(["dir", "sym", "fifo"]), max_size=3),
    chunk_size=st.sampled_from([2048, 4096, 8 << 20]),
)
def test_random_tars_give_the_same_rows_or_error(members, fmt, extras, chunk_size):
    try:
        data = make_tar(members, fmt=FORMATS[fmt], extra=_extras(extras))
    except ValueError:  # a name ustar cannot hold
        return
    _same(data, chunk_size=chunk_size)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    samples=st.integers(1, 30),
    fmt=st.sampled_from(sorted(FORMATS)),
    cut=st.floats(0, 1),
    flip=st.one_of(st.none(), st.floats(0, 1)),
    chunk_size=st.sampled_from([2048, 4096, 8 << 20]),
    sized=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_damaged_tars_give_the_same_error_and_offset(
    samples, fmt, cut, flip, chunk_size, sized, seed
):
    rng = np.random.default_rng(seed)
    members = [
        (f"s/{i:04d}.{ext}", rng.bytes(int(rng.integers(0, 3000))))
        for i in range(samples)
        for ext in ("jpg", "cls")
    ]
    data = bytearray(make_tar(members, fmt=FORMATS[fmt]))
    if flip is not None:
        data[int(flip * (len(data) - 1))] ^= 1 << int(rng.integers(0, 8))
    data = data[: int(cut * len(data))] if cut < 0.95 else data
    _same(bytes(data), chunk_size=chunk_size, **({"size": len(data)} if sized else {}))


@pytest.mark.parametrize("chunk_size", [2048, 8 << 20])
def test_a_sample_split_across_the_archive_is_reported_at_the_same_offset(chunk_size):
    members = [(f"k/{i}.jpg", bytes(700)) for i in range(12)] + [("k/3.cls", b"x")]
    result = _same(make_tar(members, fmt=tarfile.GNU_FORMAT), chunk_size=chunk_size)
    assert result[0] is SplitSampleError


def test_duplicate_members_and_non_utf8_names_are_reported_alike():
    dup = make_tar([("a.jpg", b"1"), ("a.cls", b"2"), ("a.JPG", b"3")])
    assert "two members named 'jpg'" in _same(dup)[1]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo("ok.jpg")
        tar.addfile(info, io.BytesIO(b""))
        info = tarfile.TarInfo("x.jpg")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"y"))
    data = bytearray(raw.getvalue())
    at = data.index(b"x.jpg")
    data[at] = 0xFF  # a name that is not UTF-8 (the header checksum fixed below)
    data[at + 148 : at + 156] = b"        "
    data[at + 148 : at + 156] = b"%06o\0 " % sum(data[at : at + 512])
    assert _same(bytes(data))[0] is TarMemberNameError


def test_a_key_longer_than_the_format_allows_is_reported_alike():
    long_key = "k" * (MAX_KEY_BYTES + 1)
    data = make_tar([("a.jpg", b"1"), (f"{long_key}.jpg", b"2"), ("b.jpg", b"3")])
    result = _same(data)
    assert result[0] is TarMemberNameError and "longer than" in result[1]


def _group_error(grouper: Any, pieces: Any) -> tuple[Any, ...]:
    grouper.feed(pieces)  # the limit is checked when the sample closes
    with pytest.raises(ShardcatError) as info:
        grouper.finish()
    return error_fields(info.value)


def test_a_sample_with_more_entries_than_the_format_allows_is_reported_alike():
    # The reference's duplicate check is quadratic (minutes at this size): compare with its
    # error as it builds it.
    from shardcat.format.tar.scan import _CompiledGrouper, _many_error

    n = MAX_ENTRIES + 1
    names = [f"k.e{i}".encode() for i in range(n)]
    firsts = [i * 1024 for i in range(n)]
    batch = (names, firsts, [f + 512 for f in firsts], [0] * n, [0] * n)
    compiled = _group_error(_CompiledGrouper("mem.tar", ctar.Grouper()), [batch])
    assert compiled == error_fields(_many_error("k", n, "mem.tar", 0))
