"""The C sources' copies of the byte layout equal what the Python side declares.

``format/spec.py`` (and ``format/tar/spec.py``) are the one statement of the
format; the compiled modules hold copies of the numbers they need as
``#define`` lines in their headers. This test reads those headers as text
(so it runs without a compiler or a build) and compares each number with
its Python source, so that a change on one side alone fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shardcat.format import records, spec, writer
from shardcat.format.tar import scan, walk
from shardcat.format.tar import spec as tar_spec

FORMAT = Path(spec.__file__).parent


def _defines(path: Path) -> dict[str, int]:
    """Every ``#define NAME <integer expression>`` of a C header, evaluated."""
    out: dict[str, int] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"#define\s+([A-Z_][A-Z0-9_]*)\s+([^/]+?)\s*(?:/\*.*)?$", line)
        if m and re.fullmatch(r"[0-9a-fA-Fx()<< ]+", m.group(2)):
            out[m.group(1)] = int(eval(m.group(2)))
    return out


CODEC = _defines(FORMAT / "ccodec" / "layout.h")
TAR = _defines(FORMAT / "tar" / "_ctar.h") | _defines(FORMAT / "tar" / "_samples.c")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("HEAD_SIZE", spec.RECORD_HEAD_DTYPE.itemsize),
        ("HEAD_KEY_LENGTH_AT", spec.RECORD_HEAD_DTYPE.fields["key_length"][1]),
        ("HEAD_ENTRY_COUNT_AT", spec.RECORD_HEAD_DTYPE.fields["entry_count"][1]),
        ("DESC_SIZE", spec.ENTRY_DESC_DTYPE.itemsize),
        ("BATCH_ROW_SIZE", spec.BATCH_ROW_DTYPE.itemsize),
        ("MAX_ZERO_PAD", spec.ALIGNMENTS[-1]),
        ("JOIN_LIMIT", writer._JOIN_LIMIT),
        ("TEXT_CACHE_MAX", records._TEXT_CACHE_MAX),
    ],
)
def test_the_record_codec_layout_matches_spec(name: str, expected: int) -> None:
    assert CODEC[name] == expected


def test_the_record_codec_tag_matches_spec() -> None:
    text = (FORMAT / "ccodec" / "layout.h").read_text()
    m = re.search(r"RECORD_TAG\[4\] = \{(.*?)\};", text)
    assert m is not None
    chars = [c.strip() for c in m.group(1).split(",")]
    tag = bytes(ord(c.strip("'")) if c.startswith("'") else int(c) for c in chars)
    assert tag == spec.RECORD_TAG


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("BLOCK", tar_spec.BLOCK),
        ("CHKSUM_AT", tar_spec.CHKSUM_AT),
        ("SIZE_AT", tar_spec.SIZE_AT),
        ("TYPE_AT", tar_spec.USTAR_HEADER_DTYPE.fields["typeflag"][1]),
        ("MAGIC_AT", tar_spec.USTAR_HEADER_DTYPE.fields["magic"][1]),
        ("PREFIX_AT", tar_spec.USTAR_HEADER_DTYPE.fields["prefix"][1]),
        ("MAX_EXTENSION_BYTES", walk.MAX_EXTENSION_BYTES),
        ("MAX_KEY_BYTES", spec.MAX_KEY_BYTES),
        ("MAX_ENTRIES", spec.MAX_ENTRIES),
        ("MAX_SPECS", scan.MAX_SPECS),
    ],
)
def test_the_tar_walker_layout_matches_spec(name: str, expected: int) -> None:
    assert TAR[name] == expected
