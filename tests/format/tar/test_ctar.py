"""The compiled tar walker against the Python reference: same members, CRCs and errors."""

from __future__ import annotations

import io
import random
import tarfile
from typing import Any

import crc32c as crc32c_package
import pytest

from shardcat.errors import ShardcatError
from shardcat.format.tar import scan_tar, tarwalker
from shardcat.format.tar.spec import BLOCK, CHKSUM_AT, SIZE_AT
from shardcat.format.tar.walk import MAX_EXTENSION_BYTES, TarWalker
from shardcat.testing.mutations import mutations

from .helpers import make_tar

ctar: Any = pytest.importorskip("shardcat.format.tar._ctar")


def test_the_c_constants_match_the_python_ones():
    assert ctar.BLOCK == BLOCK
    assert ctar.MAX_EXTENSION_BYTES == MAX_EXTENSION_BYTES
    assert (CHKSUM_AT, SIZE_AT) == (148, 124)


@pytest.mark.parametrize("table", [False, True])
def test_crc32c_matches_the_package_at_every_edge_length(table):
    crc = ctar.crc32c_table if table else ctar.crc32c
    rng = random.Random(7)
    data = rng.randbytes(3 * 8192 * 2 + 1000)
    lengths = [*range(0, 70), 255, 256, 767, 768, 769, 3 * 8192 - 1, 3 * 8192, 3 * 8192 + 9]
    lengths += [rng.randrange(len(data)) for _ in range(40)]
    for n in lengths:
        for skew in (0, 1, 3, 7):  # unaligned starts
            piece = data[skew : skew + n]
            assert crc(piece) == crc32c_package.crc32c(piece), (n, skew)
            assert crc(piece, 0x1234) == crc32c_package.crc32c(piece, 0x1234), (n, skew)


def _scan(data: bytes, walker: str, **kwargs: Any) -> Any:
    """The scan's result, or the error's type, message and offset."""
    previous = tarwalker.use(walker)
    try:
        info = scan_tar(io.BytesIO(data), "mem.tar", **kwargs)
    except ShardcatError as e:
        return (type(e).__name__, str(e), getattr(e, "offset", None))
    finally:
        tarwalker.use(previous)
    return (
        info.keys,
        info.records.tolist(),
        info.entries.tolist(),
        info.size,
        info.end_offset,
        info.member_count,
        info.skipped,
    )


def _archives() -> dict[str, bytes]:
    rng = random.Random(3)
    members = [
        (f"d/{i:04d}.{ext}", rng.randbytes(rng.randrange(0, 3000)))
        for i in range(40)
        for ext in ("jpg", "cls")
    ]
    long = [(f"{'x' * 150}/{i:03d}.txt", rng.randbytes(600)) for i in range(5)]
    out = {
        "pax": make_tar(members, fmt=tarfile.PAX_FORMAT),
        "gnu": make_tar(members, fmt=tarfile.GNU_FORMAT),
        "ustar": make_tar(members, fmt=tarfile.USTAR_FORMAT),
        "gnu long names": make_tar(long, fmt=tarfile.GNU_FORMAT),
        "pax long names": make_tar(long, fmt=tarfile.PAX_FORMAT),
        "ustar prefix": make_tar(long, fmt=tarfile.USTAR_FORMAT),
    }
    links = []
    for kind, name in (
        (tarfile.DIRTYPE, "d/"),
        (tarfile.SYMTYPE, "d/link"),
        (tarfile.LNKTYPE, "d/hard"),
    ):
        info = tarfile.TarInfo(name)
        info.type = kind
        info.linkname = "d/0000.jpg" if kind != tarfile.DIRTYPE else ""
        links.append(info)
    out["links and dirs"] = make_tar(members[:6], extra=links, fmt=tarfile.GNU_FORMAT)
    buf = io.BytesIO()
    with tarfile.open(
        fileobj=buf, mode="w", format=tarfile.PAX_FORMAT, pax_headers={"path": "g/0.txt"}
    ) as tar:
        info = tarfile.TarInfo("a.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    out["pax global path"] = buf.getvalue()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("big.bin")
        info.size = 5
        info.pax_headers = {"size": "5", "comment": "x" * 40}
        tar.addfile(info, io.BytesIO(b"hello"))
    out["pax size"] = buf.getvalue()
    return out


ARCHIVES = _archives()


@pytest.mark.parametrize("name", sorted(ARCHIVES))
@pytest.mark.parametrize("chunk_size", [2048, 8 << 20])
def test_both_walkers_find_the_same_members(name, chunk_size):
    data = ARCHIVES[name]
    compiled = _scan(data, "compiled", chunk_size=chunk_size)
    assert compiled == _scan(data, "python", chunk_size=chunk_size)
    assert isinstance(compiled[0], list), compiled  # a valid archive, scanned


@pytest.mark.parametrize("name", ["pax", "gnu", "gnu long names", "links and dirs"])
def test_both_walkers_raise_the_same_error_for_every_damage(name):
    data = ARCHIVES[name]
    headers = [(at, at + BLOCK) for at in range(0, min(len(data), 16 * BLOCK), BLOCK)]
    for i, (mutation, damaged) in enumerate(
        mutations(data, seed=11, count=300, structured=headers)
    ):
        for kwargs in ({}, {"size": len(damaged)}, {"chunk_size": 4096}):
            compiled = _scan(damaged, "compiled", **kwargs)
            assert compiled == _scan(damaged, "python", **kwargs), (i, mutation, kwargs)


def test_the_compiled_loop_stops_in_front_of_what_it_does_not_accept():
    data = bytearray(ARCHIVES["gnu"])
    data[CHKSUM_AT] ^= 1  # the first header's checksum
    stop, members, skipped, _, names, *_ = ctar.walk(data, 0, len(data), 0, -1, None)
    assert (stop, members, skipped, names) == (0, 0, 0, [])
    walker = TarWalker(io.BytesIO(bytes(data)), "mem.tar")
    with pytest.raises(ShardcatError):
        list(walker)
