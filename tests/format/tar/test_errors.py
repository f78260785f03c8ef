"""Damaged and malformed tars: each gets a typed error naming the file and the byte offset."""

from __future__ import annotations

import io
import tarfile

import pytest

from shardcat.errors import ChecksumError, FormatError, TruncatedError
from shardcat.format import BytesSource
from shardcat.format.tar import (
    DuplicateMemberError,
    NotATarError,
    SplitSampleError,
    TarChecksumError,
    TarError,
    TarMemberNameError,
    TarNumberError,
    TarTruncatedError,
    iter_tar_samples,
    read_tar_record,
    read_tar_sample,
    scan_tar,
)

from .helpers import make_tar, scan_bytes

MEMBERS = [
    ("0001.jpg", b"a" * 700),
    ("0001.cls", b"1"),
    ("0002.jpg", b"b" * 1500),
    ("0002.cls", b"2"),
]


def _ustar() -> bytes:
    return make_tar(MEMBERS, fmt=tarfile.USTAR_FORMAT)


def _header_offsets(data: bytes) -> list[int]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return [m.offset for m in tar.getmembers()]


def _reseal(data: bytearray, header: int) -> None:
    """Recompute a header's checksum after editing it on purpose."""
    data[header + 148 : header + 156] = b" " * 8
    data[header + 148 : header + 156] = b"%06o\0 " % sum(data[header : header + 512])


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "empty"),
        (b"hello, world\n" * 10, "less than one"),
        (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8, "not a tar header"),
        (b"PK\x03\x04" + b"\x01" * 2000, "not a tar header"),
    ],
)
def test_not_a_tar(data, why):
    with pytest.raises(NotATarError, match=why) as e:
        scan_bytes(data)
    assert e.value.path == "mem.tar" and e.value.offset == 0
    assert isinstance(e.value, FormatError)


def test_an_all_zero_file_is_an_empty_archive():
    info = scan_bytes(bytes(10240))
    assert info.record_count == 0 and info.end_offset == 0 and info.size == 10240


def test_every_truncation_is_reported_with_its_offset():
    data = _ustar()
    end_marker = len(data) - 1024 if data.endswith(bytes(1024)) else None
    offsets = _header_offsets(data)
    end_of_members = scan_bytes(data).end_offset
    assert end_marker is not None and end_of_members >= offsets[-1] + 512
    # The start of a header, with its 'ustar' magic: a tar cut short; before the magic: not a tar.
    with pytest.raises(TarTruncatedError):
        scan_bytes(data[:300])
    with pytest.raises(NotATarError):
        scan_bytes(data[:200])
    for cut in range(512, end_of_members + 1):
        with pytest.raises(TarTruncatedError) as e:
            scan_bytes(data[:cut])
        err = e.value
        assert isinstance(err, TruncatedError)
        assert err.path == "mem.tar"
        # The offset is a header start: the member whose payload or header was cut.
        assert err.offset in [*offsets, end_of_members] or err.offset == cut // 512 * 512
        assert f"ends at byte {cut}" in str(err) or "cut short" in str(err)
    # Cut after the first end-of-archive block: complete (tarfile agrees).
    assert scan_bytes(data[: end_of_members + 512]).record_count == 2


def test_a_bad_header_checksum_names_the_header():
    data = bytearray(_ustar())
    second = _header_offsets(bytes(data))[2]
    data[second + 3] ^= 0x01  # a byte of the third member's name
    with pytest.raises(TarChecksumError) as e:
        scan_bytes(bytes(data))
    assert e.value.offset == second and e.value.path == "mem.tar"
    assert isinstance(e.value, ChecksumError)


def test_a_checksum_error_wins_over_what_the_damaged_header_then_causes():
    # A flipped bit in a size field: the checksum catches it before the
    # scanner reports the nonsense that size would lead to.
    data = bytearray(_ustar())
    header = _header_offsets(bytes(data))[1]
    data[header + 124 + 9] ^= 0x04  # '0' -> '4' in the size: 2 KiB more
    with pytest.raises(TarChecksumError) as e:
        scan_bytes(bytes(data))
    assert e.value.offset == header


def test_every_flipped_header_byte_is_caught():
    # All but the checksum field's NUL and space terminators (bytes 154-155): tar's
    # checksum counts its own field as spaces, and a reader ignores what follows the NUL.
    data = _ustar()
    for header in _header_offsets(data)[:2]:
        for at in [*range(header, header + 154), *range(header + 156, header + 512)]:
            damaged = bytearray(data)
            damaged[at] ^= 0x20
            with pytest.raises(TarError) as e:
                scan_bytes(bytes(damaged))
            assert e.value.offset == header or (header == 0 and isinstance(e.value, NotATarError))


@pytest.mark.parametrize("known_size", [True, False])
def test_a_size_field_past_the_end_of_the_file(known_size):
    data = bytearray(_ustar())
    header = _header_offsets(bytes(data))[2]
    data[header + 124 : header + 136] = b"%011o\0" % (1 << 30)
    _reseal(data, header)
    size = len(data) if known_size else None
    with pytest.raises(TarTruncatedError, match=f"declares {1 << 30} bytes") as e:
        scan_tar(io.BytesIO(bytes(data)), "s3://bucket/x.tar", size=size)
    assert e.value.offset == header and e.value.path == "s3://bucket/x.tar"
    assert f"ends at byte {len(data)}" in str(e.value)


def test_a_size_field_that_is_not_a_number():
    data = bytearray(_ustar())
    header = _header_offsets(bytes(data))[1]
    data[header + 124 : header + 136] = b"12x4\0       "
    _reseal(data, header)
    with pytest.raises(TarNumberError) as e:
        scan_bytes(bytes(data))
    assert e.value.offset == header


def test_members_of_one_sample_that_are_not_adjacent():
    data = make_tar([("a.jpg", b"1"), ("b.jpg", b"2"), ("a.cls", b"3")])
    offsets = _header_offsets(data)
    with pytest.raises(SplitSampleError) as e:
        scan_bytes(data)
    err = e.value
    assert err.key == "a" and err.first_offset == offsets[0] and err.offset == offsets[2]
    assert "not adjacent" in str(err)
    # The streaming iterator yields what came before, then fails the same way.
    it = iter_tar_samples(io.BytesIO(data), "mem.tar")
    with pytest.raises(SplitSampleError):
        list(it)


def test_two_members_with_one_name_in_a_sample():
    data = make_tar([("a.jpg", b"1"), ("a.JPG", b"2")])
    with pytest.raises(DuplicateMemberError, match="two members named 'jpg'") as e:
        scan_bytes(data)
    assert e.value.offset == _header_offsets(data)[1]


def test_a_member_name_that_is_not_utf8():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT, encoding="latin-1") as t:
        info = tarfile.TarInfo("caf\xe9.jpg")
        t.addfile(info, io.BytesIO(b""))
    with pytest.raises(TarMemberNameError, match="not valid UTF-8") as e:
        scan_bytes(buf.getvalue())
    assert e.value.offset == 0


def test_a_malformed_pax_header():
    data = bytearray(make_tar([("a" * 120 + ".jpg", b"x")], fmt=tarfile.PAX_FORMAT))
    at = data.index(b" path=")
    data[at - 3 : at] = b"999"  # the record's length now runs past the header's data
    _reseal(data, 0)
    with pytest.raises(TarError, match="pax extended header is malformed") as e:
        scan_bytes(bytes(data))
    assert e.value.offset == 0


def test_a_payload_changed_after_indexing_fails_its_crc_at_lookup():
    data = _ustar()
    info = scan_bytes(data)
    for record in range(info.record_count):
        for i, (at, size, _) in enumerate(info.spans(record)):
            damaged = bytearray(data)
            damaged[int(info.offsets[record]) + at + size // 2] ^= 0x80
            with pytest.raises(ChecksumError) as e:
                read_tar_sample(BytesSource(bytes(damaged), "mem.tar"), info, record)
            name = info.layout(record)[i].name
            assert f"entry {name!r} of key {info.keys[record]!r}" in str(e.value)
            assert e.value.offset == int(info.offsets[record]) + at
        assert read_tar_sample(BytesSource(data), info, record).key == info.keys[record]


def test_a_short_read_of_a_sample_is_truncated():
    data = _ustar()
    info = scan_bytes(data)
    start, length = int(info.offsets[1]), int(info.lengths[1])
    with pytest.raises(TruncatedError):
        read_tar_record(
            data[start : start + length - 1], info.keys[1], info.layout(1), info.spans(1)
        )
