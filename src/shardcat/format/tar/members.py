"""Writing WebDataset tars: member names checked for a round trip, and their headers.

A sample ``key`` with entries ``jpg`` and ``json`` becomes the members
``key.jpg`` and ``key.json``, one after the other. WebDataset (and
:func:`~.scan.split_member_name`, which follows it) reads a member name back
by splitting it at the first dot after its last ``/``, lower-casing the
rest, and skipping ``__name__``-style metadata members. :func:`member_name`
refuses every key and entry name that would not read back as itself, so an
exported tar is read back exactly by either reader.

Each member is one POSIX ustar header, then its payload padded to a block.
A name longer than ustar's fields hold (100 bytes, or a 155-byte folder
prefix and a 100-byte name) is given to a pax extended header (``x``)
before it, as POSIX.1-2001 and Python's ``tarfile`` write it. Every header
is the same for the same name and size (mode 0644, owner 0, time 0), so an
export written twice is the same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ...errors import ExportNameError, RecordTooLargeError
from .scan import split_member_name
from .spec import BLOCK, blocks

__all__ = [
    "END_OF_ARCHIVE",
    "MemberHeaders",
    "member_headers",
    "member_name",
    "member_names",
    "member_span",
]

END_OF_ARCHIVE = bytes(2 * BLOCK)
"""Two zero blocks end a tar."""

_MAX_SIZE = 8**11 - 1
"""The largest payload an 11-digit octal size field holds (8 GiB - 1)."""
_PAX_NAME = b"././@PaxHeader"
"""The name field of a pax header, as Python's ``tarfile`` writes it."""
_WDS_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
"""WebDataset's own split (``webdataset.tariterators.base_plus_ext``)."""


def member_name(key: str, entry: str) -> str:
    """``key.entry``, the member name of entry ``entry`` of sample ``key``.

    Raises
    ------
    ExportNameError
        WebDataset (or shardcat's ``index-tar``) would not read the name back
        as this key and entry; the message says why and what to do.
    """
    name = f"{key}.{entry}"
    why = _refusal(key, entry, name)
    if why is not None:
        raise ExportNameError(
            f"sample {key!r}, entry {entry!r}: {why}, so it cannot be exported as a WebDataset "
            "member and read back the same; write the sample again under another key (or "
            "entry name), or export without it (delete the key in a new version)",
            key=key,
            entry=entry,
        )
    return name


def member_names(key: str, entries: Sequence[str]) -> list[str]:
    """The member names of sample ``key`` with these entries, in order.

    Raises
    ------
    ExportNameError
        A name would not read back (:func:`member_name`), or the sample has no
        entry: a tar holds a sample only as its members, so it would vanish.
    """
    if not entries:
        raise ExportNameError(
            f"sample {key!r} has no entries, and a tar holds a sample only as its members "
            "(key.entry), so it would not be there to read back; give it an entry, or "
            "export without it (delete the key in a new version)",
            key=key,
        )
    return [member_name(key, entry) for entry in entries]


def _refusal(key: str, entry: str, name: str) -> str | None:
    """Why ``name`` does not round-trip as ``(key, entry)``, or None when it does."""
    base = key[key.rfind("/") + 1 :]
    if "\0" in name or "\n" in name:
        return "tar member names cannot hold NUL or newline characters"
    if not base:
        return "the key is empty after its last '/' (WebDataset needs a name there)"
    if "." in base:
        return (
            "the key has a '.' after its last '/', and WebDataset splits a member name at the "
            "first dot there (the rest would read as the entry name)"
        )
    if key.startswith("/") or any(part in ("", ".", "..") for part in key.split("/")):
        return "the key is an absolute path or has an empty, '.' or '..' folder (unsafe to extract)"
    if not entry or "/" in entry:
        return "the entry name is empty or holds a '/'"
    if entry != entry.lower():
        return "WebDataset lower-cases entry names when it reads them"
    if entry.startswith("__"):
        # __key__, __url__, __local_path__: readers take every "__" name for one of these.
        return "WebDataset keeps entry names starting with '__' for fields of its own"
    match = _WDS_KEY.match(name)
    if match is None or (match.group(1), match.group(2)) != (key, entry):
        return "WebDataset would split the member name elsewhere"
    if split_member_name(name) != (key, entry):
        return "WebDataset skips it as a metadata member (a name like __meta__)"
    return None


@dataclass(frozen=True, slots=True)
class MemberHeaders:
    """The header blocks written before one member's payload.

    ``names``, ``sizes`` and ``offsets`` (relative to ``data``'s start) give
    each 512-byte header as TARIDX rows it: a pax header and then the ustar
    one, or the ustar header alone.
    """

    data: bytes
    names: tuple[str, ...]
    sizes: tuple[int, ...]
    offsets: tuple[int, ...]


def member_span(name: str, size: int) -> int:
    """Bytes member ``name`` of ``size`` payload bytes takes in a tar: headers, payload, padding."""
    raw = name.encode("utf-8")
    head = (
        BLOCK if _ustar_fields(raw) is not None else BLOCK + blocks(len(_pax_record(raw))) + BLOCK
    )
    return head + blocks(size)


def member_headers(name: str, size: int) -> MemberHeaders:
    """The header blocks of a regular file ``name`` with ``size`` payload bytes.

    Raises
    ------
    RecordTooLargeError
        The payload is 8 GiB or more (larger than a ustar size field).
    """
    if not 0 <= size <= _MAX_SIZE:
        raise RecordTooLargeError(
            f"member {name!r} has {size:,} bytes; a tar member exported by shardcat holds less "
            "than 8 GiB: split the entry"
        )
    raw = name.encode("utf-8")
    fields = _ustar_fields(raw)
    if fields is not None:
        return MemberHeaders(_ustar(fields[1], fields[0], size), (name,), (size,), (0,))
    record = _pax_record(raw)
    short = raw[:100]
    while short:  # cut at a UTF-8 character's start, as tarfile does
        try:
            short.decode("utf-8")
            break
        except UnicodeDecodeError:
            short = short[:-1]
    pax = _ustar(_PAX_NAME, b"", len(record), typeflag=b"x")
    data = pax + record + bytes(blocks(len(record)) - len(record)) + _ustar(short, b"", size)
    return MemberHeaders(
        data,
        (_PAX_NAME.decode(), short.decode("utf-8")),
        (len(record), size),
        (0, BLOCK + blocks(len(record))),
    )


def _ustar_fields(raw: bytes) -> tuple[bytes, bytes] | None:
    """``(prefix, name)`` fields holding ``raw`` in ustar, or None when it does not fit."""
    if len(raw) <= 100:
        return b"", raw
    # The prefix is a folder part: the first '/' that leaves at most 100 bytes after it,
    # if it leaves at most 155 (and at least 1) before it.
    at = raw.find(b"/", max(1, len(raw) - 101))
    return (raw[:at], raw[at + 1 :]) if 0 < at <= 155 else None


def _pax_record(raw: bytes) -> bytes:
    """The pax record ``"<len> path=<name>\\n"``; ``<len>`` counts its own digits."""
    body = b" path=" + raw + b"\n"
    n = len(body) + 1
    while len(str(n)) + len(body) != n:
        n += 1
    return str(n).encode() + body


def _fixed_fields(typeflag: bytes) -> tuple[bytes, bytes, bytes, int]:
    """The header's bytes around its name, size and prefix fields, and their byte sum."""
    header = bytearray(BLOCK)
    header[100:124] = b"0000644\0" + b"0000000\0" * 2  # mode, uid, gid
    header[136:148] = b"00000000000\0"  # mtime
    header[148:156] = b" " * 8  # the checksum field counts as spaces
    header[156:157] = typeflag
    header[257:265] = b"ustar\x0000"
    header[329:345] = b"0000000\0" * 2  # devmajor, devminor
    return bytes(header[100:124]), bytes(header[136:148]), bytes(header[156:345]), sum(header)


_FILE = _fixed_fields(b"0")
_PAX = _fixed_fields(b"x")


def _ustar(name: bytes, prefix: bytes, size: int, *, typeflag: bytes = b"0") -> bytes:
    """One 512-byte ustar header; the fixed fields are joined, not rebuilt, per member."""
    ids, mtime, rest, fixed_sum = _PAX if typeflag == b"x" else _FILE
    size_field = b"%011o\0" % size
    chksum = b"%06o\0 " % (fixed_sum + sum(name) + sum(prefix) + sum(size_field))
    return b"".join(
        (
            name.ljust(100, b"\0"),
            ids,
            size_field,
            mtime,
            chksum,
            rest,
            prefix.ljust(155, b"\0"),
            _PAD12,
        )
    )


_PAD12 = bytes(12)
