"""The fixed 64-byte header and 64-byte trailer: encode, decode, validate.

Validation order is magic, then version, then CRC: a file from a newer major
version may change everything after the version fields, so it must be told
apart from a corrupted one before its CRC is trusted.
"""

from __future__ import annotations

import datetime as dt
import uuid
import warnings
from dataclasses import dataclass

from ..errors import ChecksumError, FormatError, NewerVersionWarning, TruncatedError, VersionError
from .checksums import crc32c
from .spec import (
    ALIGNMENTS,
    CREATED_US_MAX,
    CREATED_US_MIN,
    FORMAT_VERSION,
    HEADER_MAGIC,
    HEADER_SIZE,
    HEADER_STRUCT,
    NO_SHARD_NUMBER,
    TRAILER_MAGIC,
    TRAILER_SIZE,
    TRAILER_STRUCT,
    Codec,
)

__all__ = ["Header", "Trailer", "check_version", "created_datetime", "describe_bad_magic"]

_HEADER_CRC_AT = HEADER_SIZE - 4
_TRAILER_CRC_AT = 52
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def clamp_created_us(value: int) -> int:
    """``created_us`` limited to the range a reader reports (see ``spec.CREATED_US_MIN``)."""
    return min(max(value, CREATED_US_MIN), CREATED_US_MAX)


def created_datetime(created_us: int) -> dt.datetime:
    """The UTC time of a ``created_us`` value, clamped to years 1 to 9999; never raises."""
    us = clamp_created_us(created_us)
    try:
        # The conversion shardcat has always used (and `shardcat inspect` uses): catalog
        # rows of existing shards keep their exact value.
        return dt.datetime.fromtimestamp(us / 1e6, tz=dt.timezone.utc)
    except (OverflowError, OSError, ValueError):  # platforms without negative timestamps
        return _EPOCH + dt.timedelta(microseconds=us)


@dataclass(frozen=True, slots=True)
class Header:
    """What a shard knows before its first record."""

    version: tuple[int, int]
    flags: int
    created_us: int
    file_id: bytes
    shard_number: int
    alignment: int
    default_codec: Codec
    crc: int = 0

    @classmethod
    def new(
        cls,
        *,
        created_us: int,
        shard_number: int | None = None,
        alignment: int,
        default_codec: Codec,
        file_id: bytes | None = None,
    ) -> Header:
        return cls(
            version=FORMAT_VERSION,
            flags=0,
            created_us=created_us,
            file_id=file_id or uuid.uuid4().bytes,
            shard_number=NO_SHARD_NUMBER if shard_number is None else shard_number,
            alignment=alignment,
            default_codec=default_codec,
        )

    @property
    def file_uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.file_id)

    @property
    def created(self) -> dt.datetime:
        """When the writer was opened (UTC), by the writer's clock."""
        return created_datetime(self.created_us)

    def encode(self) -> bytes:
        body = HEADER_STRUCT.pack(
            HEADER_MAGIC,
            self.version[0],
            self.version[1],
            self.flags,
            self.created_us,
            self.file_id,
            self.shard_number,
            self.alignment,
            int(self.default_codec),
            b"\0" * 7,
            0,
        )[:_HEADER_CRC_AT]
        return body + crc32c(body).to_bytes(4, "little")

    @classmethod
    def decode(cls, data: bytes, *, path: str | None = None, warn: bool = True) -> Header:
        """Decode and check a header; ``warn=False`` when the trailer already warned."""
        if len(data) < HEADER_SIZE:
            if data[: len(HEADER_MAGIC)] == HEADER_MAGIC[: len(data)]:
                raise TruncatedError(
                    f"file ends after {len(data)} bytes, inside the {HEADER_SIZE}-byte header; "
                    "the shard was cut short: rewrite or re-copy it",
                    path=path,
                    offset=len(data),
                )
            raise FormatError(
                describe_bad_magic(data[:8], HEADER_MAGIC, "a shardcat shard"), path=path, offset=0
            )
        magic = data[:8]
        if magic != HEADER_MAGIC:
            raise FormatError(
                describe_bad_magic(magic, HEADER_MAGIC, "a shardcat shard"), path=path, offset=0
            )
        fields = HEADER_STRUCT.unpack_from(data)
        check_version((fields[1], fields[2]), path=path, offset=8, warn=warn)
        stored_crc = fields[10]
        actual = crc32c(data[:_HEADER_CRC_AT])
        if stored_crc != actual:
            raise ChecksumError(
                f"header CRC32C mismatch (stored {stored_crc:#010x}, computed {actual:#010x}); "
                "the header was corrupted after writing: restore the shard from a good copy",
                path=path,
                offset=_HEADER_CRC_AT,
            )
        alignment = fields[7]
        if alignment not in ALIGNMENTS:
            raise FormatError(
                f"header alignment is {alignment}, expected one of {ALIGNMENTS}",
                path=path,
                offset=48,
            )
        try:
            codec = Codec(fields[8])
        except ValueError:
            codec = Codec.NONE  # informational only; entries carry their own codec
        return cls(
            version=(fields[1], fields[2]),
            flags=fields[3],
            # Informational, and only as good as the writer's clock: a value no
            # calendar can show is clamped rather than rejected (the CRC above
            # covers the stored bytes, which stay as they are).
            created_us=clamp_created_us(fields[4]),
            file_id=fields[5],
            shard_number=fields[6],
            alignment=alignment,
            default_codec=codec,
            crc=stored_crc,
        )


@dataclass(frozen=True, slots=True)
class Trailer:
    """The last 64 bytes: where the footer is and what it holds."""

    footer_offset: int
    record_count: int
    entry_count: int
    keys_length: int
    metadata_length: int
    data_crc: int
    footer_crc: int
    header_crc: int
    version: tuple[int, int] = FORMAT_VERSION
    crc: int = 0

    def encode(self) -> bytes:
        body = TRAILER_STRUCT.pack(
            self.footer_offset,
            self.record_count,
            self.entry_count,
            self.keys_length,
            self.metadata_length,
            self.data_crc,
            self.footer_crc,
            self.header_crc,
            self.version[0],
            self.version[1],
            0,
            TRAILER_MAGIC,
        )
        crc = crc32c(body[:_TRAILER_CRC_AT])
        return body[:_TRAILER_CRC_AT] + crc.to_bytes(4, "little") + body[_TRAILER_CRC_AT + 4 :]

    @classmethod
    def decode(
        cls, data: bytes | memoryview, *, path: str | None = None, file_offset: int | None = None
    ) -> Trailer:
        """Decode the trailer from the last ``TRAILER_SIZE`` bytes of ``data``."""
        if len(data) < TRAILER_SIZE:
            raise TruncatedError(
                f"file is {len(data)} bytes, shorter than the {TRAILER_SIZE}-byte trailer; "
                "it is empty or was cut short",
                path=path,
            )
        raw = bytes(data[-TRAILER_SIZE:])
        magic = raw[-8:]
        if magic != TRAILER_MAGIC:
            raise FormatError(
                describe_bad_magic(magic, TRAILER_MAGIC, "a complete shardcat shard (its trailer)"),
                path=path,
                offset=file_offset,
            )
        fields = TRAILER_STRUCT.unpack(raw)
        check_version(
            (fields[8], fields[9]),
            path=path,
            offset=None if file_offset is None else file_offset + 48,
        )
        actual = crc32c(raw[:_TRAILER_CRC_AT])
        if fields[10] != actual:
            raise ChecksumError(
                f"trailer CRC32C mismatch (stored {fields[10]:#010x}, computed {actual:#010x}); "
                "the end of the shard was corrupted: restore it from a good copy",
                path=path,
                offset=file_offset,
            )
        return cls(
            footer_offset=fields[0],
            record_count=fields[1],
            entry_count=fields[2],
            keys_length=fields[3],
            metadata_length=fields[4],
            data_crc=fields[5],
            footer_crc=fields[6],
            header_crc=fields[7],
            version=(fields[8], fields[9]),
            crc=fields[10],
        )


def check_version(
    version: tuple[int, int], *, path: str | None, offset: int | None, warn: bool = True
) -> None:
    """Reject other major versions; warn about newer minor versions."""
    major, minor = version
    ours = FORMAT_VERSION
    if major > ours[0]:
        raise VersionError(
            f"shard format version {major}.{minor} is newer than this shardcat reads "
            f"(up to {ours[0]}.x, written as {ours[0]}.{ours[1]}); upgrade shardcat to read it",
            path=path,
            offset=offset,
        )
    if major < ours[0]:
        raise VersionError(
            f"shard format version {major}.{minor} is older than this shardcat reads "
            f"({ours[0]}.x); read it with the shardcat release that wrote it",
            path=path,
            offset=offset,
        )
    if minor > ours[1] and warn:
        where = f"{path}: " if path else ""
        warnings.warn(
            f"{where}shard format {major}.{minor} is newer than {ours[0]}.{ours[1]}; "
            "reading it, additions this version does not know are ignored",
            NewerVersionWarning,
            stacklevel=4,
        )


def describe_bad_magic(found: bytes, expected: bytes, what: str) -> str:
    """Explain a wrong magic number, naming line-ending damage when it is that."""
    hint = ""
    crlf_to_lf = expected.replace(b"\r\n", b"\n")
    lf_to_crlf = expected.replace(b"\n", b"\r\n")
    if len(found) >= 7 and any(
        found[:7] == m[:7] or found[-7:] == m[-7:] for m in (crlf_to_lf, lf_to_crlf)
    ):
        hint = "; the line endings were converted by a text-mode transfer: copy the file in binary mode"
    elif found[:1] == b"\x09" and found[1:4] == expected[1:4]:
        hint = "; the high bit was stripped by a 7-bit transfer: copy the file in binary mode"
    return f"not {what}: magic bytes are {found!r}, expected {expected!r}{hint}"
