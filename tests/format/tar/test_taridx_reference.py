"""TARIDX as iTar (the format's reference implementation) writes it.

Golden files: the ``.taridx`` files iTar wrote for three sets of tars
(tests/data/taridx_reference/, see its README) must come out of shardcat
byte for byte, and must be accepted as describing their tars. Property
tests: random folder layouts, written by Python's tarfile in each of its
formats, against :func:`itar_model`, the reference's rules stated here
directly over the tar's bytes (not through shardcat's scan or its code).
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import struct
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcat.format import BytesSource
from shardcat.format.tar import (
    Taridx,
    TaridxError,
    read_taridx,
    scan_tar,
    shared_stems,
    taridx_from_scans,
    verify_scan,
)

from .helpers import scan_bytes

REFERENCE = Path(__file__).parents[2] / "data" / "taridx_reference"
CASES = ("flat", "folders", "mixed")
HEADER = struct.Struct("<8sHHHHQQIIQQB7s")
ROW = struct.Struct("<HQQHIQ")


def _tars(case: str) -> list[Path]:
    return sorted((REFERENCE / case).glob("*.tar"))


def _sources(paths: list[Path]) -> list[BytesSource]:
    return [BytesSource(p.read_bytes(), str(p)) for p in paths]


# --- the golden files ---------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_the_index_of_the_reference_tars_is_the_reference_file(case):
    tars = _tars(case)
    index = taridx_from_scans([scan_tar(t) for t in tars], sources=_sources(tars))
    assert index.to_bytes() == (REFERENCE / case / f"{case}.taridx").read_bytes()


@pytest.mark.parametrize("case", CASES)
def test_the_reference_file_describes_its_tars(case):
    tars = _tars(case)
    index = read_taridx(str(REFERENCE / case / f"{case}.taridx"))
    for fid, (tar, source) in enumerate(zip(tars, _sources(tars))):
        verify_scan(index, fid, scan_tar(tar), source=source)


def test_the_reference_file_of_other_tars_is_refused_naming_the_member():
    index = read_taridx(str(REFERENCE / "flat" / "flat.taridx"))
    (tar,) = _tars("mixed")
    with pytest.raises(TaridxError, match=r"member 0 of tar 0 \('a/b.c/x0001.jpg'\)"):
        verify_scan(index, 0, scan_tar(tar), source=_sources([tar])[0])
    # The same members in another tar's place: the first differing one is named.
    folders = _tars("folders")
    index = read_taridx(str(REFERENCE / "folders" / "folders.taridx"))
    with pytest.raises(TaridxError, match=r"member 0 of tar 1 \('img/0000.jpg'\).*not of this"):
        verify_scan(index, 1, scan_tar(folders[0]), source=_sources(folders[:1])[0])


def test_mixed_the_rules_one_by_one():
    (tar,) = _tars("mixed")
    info = scan_tar(tar)
    # shardcat's samples: WebDataset keys, `noext` in none of them.
    assert info.keys == ["a/b.c/x0001", "train/0007", "val/0007", "top"]
    index = taridx_from_scans([info], sources=_sources([tar]))
    # iTar's rows: every header, `noext` included, with an empty extension.
    assert index.n_rows == 9 and index.extensions == ("jpg", "seg.png", "json", "cls", "txt", "")
    assert index.n_stems == 4 and index.contiguous and index.crash_stems == ()
    rows = index.lookup("0007")
    assert rows["offset"].tolist() == [3072, 4096, 5120, 6144]  # train/ and val/ as one stem
    assert index.extension_of(index.lookup("x0001")) == ["jpg", "seg.png", "json"]
    assert shared_stems([info]) == (2, 1)
    # `noext` is a header the samples do not cover: its row needs the tar, read from
    # info.path when that is a local file, else from the source given.
    assert taridx_from_scans([info]).to_bytes() == index.to_bytes()
    elsewhere = dataclasses.replace(info, path="s3://bucket/mixed-000000.tar")
    with pytest.raises(TaridxError, match="headers outside its samples"):
        taridx_from_scans([elsewhere])


# --- the rules, stated independently, against random layouts -----------------


Hasher = Callable[[bytes], int]


def _xxh64(stem: bytes) -> int:
    return xxhash.xxh64(stem, seed=0).intdigest()


def _weak(stem: bytes) -> int:
    """Three hash values in all: most stems collide, so crash ids are exercised."""
    return _xxh64(stem) % 3


def itar_model(tars: list[bytes], hasher: Hasher) -> bytes:
    """The ``.taridx`` iTar writes for ``tars``, from its rules read off the tar bytes.

    Every 512-byte header up to a zero block is a row; the name is the
    NUL-terminated 100-byte field; the stem is the name after its last
    ``/`` up to the first dot, the extension the rest, lower-cased. The first
    stem with a hash is canonical, later ones get crash ids 1, 2, ... in order.
    """
    exts: dict[str, int] = {}
    canonical: dict[int, str] = {}
    crash: dict[str, int] = {}
    stems: set[str] = set()
    rows = []
    for fid, data in enumerate(tars):
        off = 0
        while off + 512 <= len(data) and data[off : off + 512] != bytes(512):
            header = data[off : off + 512]
            size = int(header[124:136].split(b"\0")[0].strip() or b"0", 8)
            name = header[:100].split(b"\0")[0].decode("utf-8", "replace")
            base = name.split("/")[-1]
            stem = base.split(".")[0]
            ext = base[len(stem) + 1 :].lower()
            h = hasher(stem.encode("utf-8"))
            stems.add(stem)
            crashid = (
                0
                if canonical.setdefault(h, stem) == stem
                else crash.setdefault(stem, len(crash) + 1)
            )
            rows.append((fid, off, size, exts.setdefault(ext, len(exts)), crashid, h))
            off += 512 + (size + 511) // 512 * 512
    ext_block = "\n".join(exts).encode("utf-8")
    crash_block = "\n".join(crash).encode("utf-8")
    runs = 1 + sum((a[5], a[4]) != (b[5], b[4]) for a, b in itertools.pairwise(rows))
    contiguous = len(rows) < 2 or runs == len(stems)
    header = HEADER.pack(
        b"TARIDX\0\0", 1, 0, 32, 64, len(stems), len(rows), len(exts), len(crash),
        64 + len(ext_block), 64 + len(ext_block) + len(crash_block), int(contiguous), bytes(7),
    )  # fmt: skip
    return header + ext_block + crash_block + b"".join(ROW.pack(*r) for r in rows)


LONG = "l" * 60 + "/" + "o" * 45 + "/"  # over 100 bytes with a name: pax, GNU or ustar prefix
FOLDERS = ("", "img/", "train/", "val/", "a/b.c/", "x/y/z/", LONG)
STEMS = ("0000", "0007", "x1", "Ab", "s")
EXTS = ("jpg", "JPG", "json", "seg.png", "CLS", "Tar.Gz", "txt")


@st.composite
def tar_layouts(draw: st.DrawFn) -> list[tuple[str, bytes, bool]]:
    """Members ``(name, payload, is_dir)`` of one WebDataset tar: samples, and extras between."""
    samples = draw(
        st.lists(
            st.tuples(st.sampled_from(FOLDERS), st.sampled_from(STEMS)),
            unique=True,
            min_size=0,
            max_size=8,
        )
    )
    members: list[tuple[str, bytes, bool]] = []
    dotted: set[str] = set()  # WebDataset keys every dot-file of a folder "<folder>": one each
    for folder, stem in samples:
        extra = draw(st.sampled_from(["", "dir", "noext", "dotfirst"]))
        if extra == "dir" and folder:
            members.append((folder, b"", True))
        elif extra == "noext":
            members.append((f"{folder}README", b"r" * draw(st.integers(0, 700)), False))
        elif extra == "dotfirst" and folder not in dotted:
            dotted.add(folder)  # iTar: stem "" (WebDataset: key "<folder>", entry "hidden")
            members.append((f"{folder}.hidden", b"h", False))
        exts = draw(st.lists(st.sampled_from(EXTS), min_size=1, max_size=3, unique_by=str.lower))
        for ext in exts:
            size = draw(st.integers(0, 1500))
            members.append((f"{folder}{stem}.{ext}", bytes([len(ext)]) * size, False))
    return members


def _write(members: list[tuple[str, bytes, bool]], fmt: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for name, data, is_dir in members:
            info = tarfile.TarInfo(name)
            info.mtime = 1_700_000_000
            if is_dir:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@settings(max_examples=60, deadline=None)
@given(
    layouts=st.lists(tar_layouts(), min_size=1, max_size=3),
    fmt=st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
    hasher=st.sampled_from([_xxh64, _weak]),
)
def test_random_folder_layouts_index_as_the_rules_say(layouts, fmt, hasher):
    tars = [_write(members, fmt) for members in layouts]
    want = itar_model(tars, hasher)
    infos = [scan_bytes(data) for data in tars]
    sources = [BytesSource(data, f"t{i}.tar") for i, data in enumerate(tars)]
    got = taridx_from_scans(infos, hasher=hasher, sources=sources)
    assert got.to_bytes() == want
    index = Taridx.from_bytes(want)
    for fid, (info, source) in enumerate(zip(infos, sources)):
        verify_scan(index, fid, info, hasher=hasher, source=source)
    # Another tar's rows never pass for this tar's, unless iTar's rows of the two are alike:
    # its stems drop the folders ("img/0007.jpg" and "0007.jpg" are one row), so tars of equal
    # sizes whose names differ only in their folders have the same rows.
    if len(tars) > 1 and itar_model(tars[:1], hasher) != itar_model(tars[1:2], hasher):
        with pytest.raises(TaridxError, match="not of this tar"):
            verify_scan(index, 1, infos[0], hasher=hasher, source=sources[0])
