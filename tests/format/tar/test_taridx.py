"""TARIDX (seed 002): byte-exact writing and reading, the worked example, every reader check.

The layout is checked with struct formats written out here from the
specification's tables, independent of the numpy dtypes the library uses.
"""

from __future__ import annotations

import io
import struct
import tarfile

import numpy as np
import pytest
import webdataset as wds
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcat.errors import InvalidKeyError, NewerVersionWarning
from shardcat.format.checksums import key_hash
from shardcat.format.tar import (
    Taridx,
    TaridxBlockError,
    TaridxCountError,
    TaridxCrashIdError,
    TaridxError,
    TaridxExtensionIdError,
    TaridxFlagError,
    TaridxLayoutError,
    TaridxMagicError,
    TaridxTruncatedError,
    TaridxVersionError,
    read_taridx,
    scan_tar,
    taridx_from_scans,
    taridx_members,
    verify_scan,
)
from shardcat.format.tar.spec import TARIDX_ROW_DTYPE

from .helpers import make_tar, scan_bytes

# The specification's tables, as struct formats.
HEADER = struct.Struct("<8sHHHHQQIIQQB7s")
ROW = struct.Struct("<HQQHIQ")
assert HEADER.size == 64 and ROW.size == 32


def _collide(_: bytes) -> int:
    """A test hook: every stem hashes alike, so every second stem needs a crash id."""
    return 0xDEADBEEF


def _worked_example() -> Taridx:
    data = make_tar(
        [("canon.jpg", b"a"), ("duplicate_stem.jpg", b"bb"), ("duplicate_stem.json", b"{}")],
        fmt=tarfile.USTAR_FORMAT,
    )
    return taridx_from_scans([scan_bytes(data)], hasher=_collide)


def test_the_worked_example_is_182_bytes_laid_out_as_specified():
    index = _worked_example()
    assert index.extensions == ("jpg", "json")
    assert index.crash_stems == ("duplicate_stem",)
    data = index.to_bytes()
    assert len(data) == 182
    (magic, major, minor, rec_size, hdr_size, n_stems, n_rows, n_ext, n_crash, off_crash,
     off_arr, flags, reserved) = HEADER.unpack_from(data)  # fmt: skip
    assert magic == b"TARIDX\0\0" and (major, minor) == (1, 0)
    assert (rec_size, hdr_size) == (32, 64)
    assert (n_stems, n_rows, n_ext, n_crash) == (2, 3, 2, 1)
    assert (off_crash, off_arr) == (72, 86)
    assert flags == 1 and reserved == bytes(7)
    assert data[64:72] == b"jpg\njson"
    assert data[72:86] == b"duplicate_stem"
    rows = [ROW.unpack_from(data, 86 + 32 * i) for i in range(3)]
    # fid, header offset, payload size, extid, crashid, keyhash
    assert rows == [
        (0, 0, 1, 0, 0, 0xDEADBEEF),
        (0, 1024, 2, 0, 1, 0xDEADBEEF),
        (0, 2048, 2, 1, 1, 0xDEADBEEF),
    ]


def test_reading_the_worked_example_back_is_byte_exact():
    data = _worked_example().to_bytes()
    index = Taridx.from_bytes(data)
    assert index.to_bytes() == data
    assert index.n_stems == 2 and index.contiguous and index.version == (1, 0)


@pytest.fixture
def two_tars(tmp_path):
    paths = []
    for n in range(2):
        path = tmp_path / f"shard-{n}.tar"
        with wds.TarWriter(str(path)) as sink:
            for i in range(25):
                sample = {"__key__": f"s{n}-{i:03d}", "jpg": b"j" * (i * 31), "cls": str(i)}
                if i % 5 == 0:
                    sample["seg.png"] = b"p" * i
                sink.write(sample)
        paths.append(path)
    return paths


def test_an_index_of_real_tars_round_trips_byte_for_byte(two_tars, tmp_path):
    infos = [scan_tar(p) for p in two_tars]
    index = taridx_from_scans(infos)
    path = tmp_path / "train.taridx"
    with open(path, "wb") as f:
        index.write(f)
    data = path.read_bytes()
    again = read_taridx(str(path))
    assert again.to_bytes() == data
    assert np.array_equal(again.rows, index.rows)
    # webdataset writes a pax header (the float mtime) before each member: iTar gives
    # every header a row, so the pax headers are rows too (stem "@PaxHeader", no extension).
    assert again.extensions == ("", "cls", "jpg", "seg.png") and again.crash_stems == ()
    # Each member's row points at its own header: its payload starts 512 bytes later.
    for fid, (p, info) in enumerate(zip(two_tars, infos)):
        tar_bytes = p.read_bytes()
        members = taridx_members(again)
        members = members[members["fid"] == fid]
        pax = members[members["extid"] == 0]
        members = members[members["extid"] != 0]
        assert len(members) == len(info.entries) == len(pax)
        with tarfile.open(p) as tar:
            regular = [m for m in tar.getmembers() if m.isreg()]
        assert members["payload_offset"].tolist() == [m.offset_data for m in regular]
        assert members["size"].tolist() == [m.size for m in regular]
        assert pax["header_offset"].tolist() == [m.offset for m in regular]
        for m in members[:5]:
            header = tar_bytes[int(m["header_offset"]) : int(m["header_offset"]) + 512]
            assert header[257:262] == b"ustar"
        verify_scan(again, fid, info)
    # The pax rows, one stem, interleave with the samples' rows: not contiguous by stem.
    assert not again.contiguous and data[56] == 0


def test_lookup_and_sample_ranges(two_tars):
    infos = [scan_tar(p) for p in two_tars]
    index = taridx_from_scans(infos)
    rows = index.lookup("s1-005")
    assert rows["fid"].tolist() == [1, 1, 1]
    assert index.extension_of(rows) == ["cls", "jpg", "seg.png"]  # webdataset sorts names
    assert len(index.lookup("missing")) == 0
    ranges = index.sample_ranges()
    # A pax header's row between each two members (as iTar indexes webdataset's tars)
    # splits every sample's rows into one run per member.
    assert len(ranges) == 2 * sum(len(scan_tar(p).entries) for p in two_tars)
    info = infos[1]
    i = info.keys.index("s1-005")
    h, c = index.stem_id("s1-005")
    mine = ranges[(ranges["keyhash"] == h) & (ranges["crashid"] == c)]
    r = {"offset": mine["offset"].min(), "length": mine["offset"].max() + mine["length"][-1]}
    r["length"] -= r["offset"]
    # The range starts at the first member's own header (TARIDX does not see pax headers).
    assert int(r["offset"]) == int(info.payload_offsets()[info.entry_starts()[i]]) - 512
    assert int(r["offset"] + r["length"]) == int(info.offsets[i] + info.lengths[i])


def test_verify_scan_refuses_an_index_of_another_tar(two_tars):
    infos = [scan_tar(p) for p in two_tars]
    index = taridx_from_scans(infos)
    with pytest.raises(TaridxError, match="not of this tar"):
        verify_scan(index, 0, infos[1])


# --- collisions ---------------------------------------------------------------


def test_colliding_stems_get_crash_ids_in_order_of_first_appearance():
    a = scan_bytes(make_tar([("x.jpg", b"1"), ("y.jpg", b"2"), ("y.cls", b"3")]))
    b = scan_bytes(make_tar([("z.jpg", b"4"), ("x2.jpg", b"5")]))
    index = taridx_from_scans([a, b], hasher=_collide)
    assert index.crash_stems == ("y", "z", "x2")
    assert index.rows["crashid"].tolist() == [0, 1, 1, 2, 3]
    assert set(index.rows["keyhash"].tolist()) == {0xDEADBEEF}
    assert index.n_stems == 4 and index.contiguous
    again = Taridx.from_bytes(index.to_bytes())
    for stem, fid, payloads in (("x", 0, 1), ("y", 0, 2), ("z", 1, 1), ("x2", 1, 1)):
        rows = again.lookup(stem, hasher=_collide)
        assert len(rows) == payloads and set(rows["fid"].tolist()) == {fid}
    assert again.stem_id("y", hasher=_collide) == (0xDEADBEEF, 1)
    assert again.stem_id("x", hasher=_collide) == (0xDEADBEEF, 0)
    verify_scan(again, 0, a, hasher=_collide)


def test_without_collisions_every_crash_id_is_zero(two_tars):
    index = taridx_from_scans([scan_tar(p) for p in two_tars])
    assert not index.rows["crashid"].any()
    stem = "s0-003"
    assert index.stem_id(stem) == (key_hash(stem.encode()), 0)


# --- the reader's checks, one crafted file each ------------------------------


def _valid() -> bytes:
    return _worked_example().to_bytes()


def _with_header(**fields: int | bytes) -> bytes:
    data = bytearray(_valid())
    names = "magic major minor rec_size hdr_size n_stems n_rows n_ext n_crash off_crash off_arr flags reserved"
    values = dict(zip(names.split(), HEADER.unpack_from(data)))
    values.update(fields)
    HEADER.pack_into(data, 0, *values.values())
    return bytes(data)


def _with_row(i: int, **fields: int) -> bytes:
    data = bytearray(_valid())
    at = 86 + 32 * i
    values = dict(
        zip(["fid", "offset", "size", "extid", "crashid", "keyhash"], ROW.unpack_from(data, at))
    )
    values.update(fields)
    ROW.pack_into(data, at, *values.values())
    return bytes(data)


@pytest.mark.parametrize(
    ("data", "error", "offset", "message"),
    [
        (_valid()[:63], TaridxTruncatedError, 0, "64-byte header"),
        (b"TARIDY\0\0" + _valid()[8:], TaridxMagicError, 0, "not a TARIDX file"),
        (_with_header(magic=b"TARIDX\0x"), TaridxMagicError, 0, "not a TARIDX file"),
        (_with_header(major=2), TaridxVersionError, 8, "version 2.0"),
        (_with_header(major=0), TaridxVersionError, 8, "version 0.0"),
        (_with_header(hdr_size=128), TaridxLayoutError, 14, "hdr_size is 128"),
        (_with_header(rec_size=24), TaridxLayoutError, 12, "rec_size is 24"),
        (_with_header(off_crash=60), TaridxLayoutError, 40, "off_crash is 60"),
        (_with_header(off_arr=70), TaridxLayoutError, 48, "before off_crash"),
        (_with_header(off_arr=500), TaridxTruncatedError, 48, "should start at byte 500"),
        (_valid() + b"\0" * 5, TaridxTruncatedError, 182, "not a whole number"),
        (_valid()[:-1], TaridxTruncatedError, 150, "not a whole number"),
        (_with_header(n_rows=4), TaridxCountError, 24, "n_rows is 4"),
        (_with_header(n_ext=3), TaridxCountError, 32, "n_ext is 3"),
        (_with_header(n_ext=1), TaridxCountError, 32, "n_ext is 1"),
        (_with_header(n_crash=0), TaridxCountError, 36, "n_crash is 0"),
        (_with_header(n_stems=3), TaridxCountError, 16, "n_stems is 3"),
        (_with_row(2, extid=2), TaridxExtensionIdError, 86 + 64 + 18, "row 2 has extid 2"),
        (_with_row(1, crashid=7), TaridxCrashIdError, 86 + 32 + 20, "row 1 has crashid 7"),
        (
            _valid()[:64] + b"jpg\njs\xff\xfe" + _valid()[72:],
            TaridxBlockError,
            70,
            "not valid UTF-8",
        ),
        (_valid()[:64] + b"jpg json" + _valid()[72:], TaridxCountError, 32, "block holds 1"),
        (_valid()[:64] + b"jpg\n jpg" + _valid()[72:], None, None, None),
        (_valid()[:64] + b"json\njpg" + _valid()[72:], None, None, None),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else None,
)
def test_each_check_of_the_reader(data, error, offset, message):
    if error is None:
        Taridx.from_bytes(data)  # differently named extensions are still a valid file
        return
    with pytest.raises(error, match=message) as e:
        Taridx.from_bytes(data, path="idx.taridx")
    assert e.value.path == "idx.taridx"
    assert e.value.offset == offset


def test_repeated_names_in_a_block():
    data = _valid()[:64] + b"jpg\njpg" + _valid()[72:]
    data = bytearray(data)
    HEADER.pack_into(data, 0, *[*HEADER.unpack_from(data)[:9], 71, 85, 1, bytes(7)])
    with pytest.raises(TaridxBlockError, match="repeats a name") as e:
        Taridx.from_bytes(bytes(data), path="idx.taridx")
    assert e.value.offset == 64


def test_a_contiguity_flag_that_lies():
    index = _worked_example()
    rows = index.rows[[1, 0, 2]]  # duplicate_stem, canon, duplicate_stem: split
    data = bytearray(Taridx(rows, index.extensions, index.crash_stems).to_bytes())
    assert data[56] == 0  # the writer says so
    Taridx.from_bytes(bytes(data))
    data[56] = 1
    with pytest.raises(TaridxFlagError) as e:
        Taridx.from_bytes(bytes(data), path="idx.taridx")
    assert e.value.offset == 56


def test_reserved_bytes_and_flag_bits_are_ignored_and_a_clear_flag_is_accepted():
    data = bytearray(_valid())
    data[57:64] = b"\xff" * 7
    data[56] = 0xFE  # bits 1-7 set, bit 0 clear: rows are contiguous anyway
    index = Taridx.from_bytes(bytes(data))
    assert index.contiguous
    assert index.to_bytes() == _valid()  # written canonically


def test_a_newer_minor_version_is_read_with_a_warning():
    with pytest.warns(NewerVersionWarning, match="1.3"):
        index = Taridx.from_bytes(_with_header(minor=3), path="idx.taridx")
    assert index.version == (1, 3) and index.n_rows == 3
    assert index.to_bytes() == _valid()


# --- the writer ---------------------------------------------------------------


def test_the_writer_refuses_names_it_cannot_represent():
    rows = np.zeros(1, dtype=TARIDX_ROW_DTYPE)
    with pytest.raises(InvalidKeyError, match="newline"):
        Taridx(rows, ("jp\ng",)).to_bytes()
    with pytest.raises(InvalidKeyError, match="newline"):
        Taridx(rows, ("jpg",), ("a\nb",)).to_bytes()
    with pytest.raises(TaridxExtensionIdError):
        Taridx(rows, ()).to_bytes()
    rows["crashid"] = 1
    with pytest.raises(TaridxCrashIdError):
        Taridx(rows, ("jpg",)).to_bytes()
    with pytest.raises(TaridxError, match="repeat"):
        Taridx(np.zeros(0, dtype=TARIDX_ROW_DTYPE), ("jpg", "jpg")).to_bytes()


def test_empty_indexes_and_a_single_empty_extension():
    empty = Taridx(np.zeros(0, dtype=TARIDX_ROW_DTYPE), ())
    data = empty.to_bytes()
    assert len(data) == 64 and data[56] == 1
    assert Taridx.from_bytes(data).to_bytes() == data
    one = Taridx(np.zeros(2, dtype=TARIDX_ROW_DTYPE), ("",))
    data = one.to_bytes()
    assert Taridx.from_bytes(data).extensions == ("",)
    assert Taridx.from_bytes(data).to_bytes() == data


_name = st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), max_size=12)


@st.composite
def _indexes(draw: st.DrawFn) -> Taridx:
    exts = tuple(draw(st.lists(_name, min_size=1, max_size=6, unique=True)))
    crash = tuple(draw(st.lists(_name.filter(bool), max_size=4, unique=True)))
    n = draw(st.integers(0, 40))
    rows = np.zeros(n, dtype=TARIDX_ROW_DTYPE)
    for i in range(n):
        rows[i] = (
            draw(st.integers(0, 0xFFFF)),
            draw(st.integers(0, 2**64 - 1)),
            draw(st.integers(0, 2**64 - 1)),
            draw(st.integers(0, len(exts) - 1)),
            draw(st.integers(0, len(crash))),
            draw(st.sampled_from([0, 1, 2**64 - 1, draw(st.integers(0, 2**64 - 1))])),
        )
    return Taridx(rows, exts, crash)


@settings(max_examples=150, deadline=None)
@given(index=_indexes())
def test_any_index_round_trips_byte_for_byte(index):
    data = index.to_bytes()
    assert (
        len(data)
        == 64
        + len("\n".join(index.extensions).encode())
        + len("\n".join(index.crash_stems).encode())
        + 32 * index.n_rows
    )
    again = Taridx.from_bytes(data)
    assert again.extensions == index.extensions
    assert again.crash_stems == index.crash_stems
    assert again.rows.tobytes() == index.rows.tobytes()
    assert again.to_bytes() == data
    header = HEADER.unpack_from(data)
    assert header[5] == len({(int(r["keyhash"]), int(r["crashid"])) for r in index.rows})
    assert header[11] == int(index.contiguous)


def test_read_taridx_from_an_open_file_and_bytes():
    data = _valid()
    assert read_taridx(io.BytesIO(data)).to_bytes() == data
    assert read_taridx(data).to_bytes() == data
