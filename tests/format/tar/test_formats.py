"""Every way tars are commonly written: tarfile's GNU, PAX and ustar formats, and GNU tar itself.

Names over 100 bytes (GNU long names, pax paths, ustar prefixes), long link
targets, directories, links and FIFOs, pax sizes, and random member sets
(hypothesis): shardcat's samples always equal webdataset's, entry by entry.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardcat.format import FileSource
from shardcat.format.tar import scan_tar, split_member_name
from shardcat.testing.tars import wds_samples

from .helpers import make_tar, read_back, scan_bytes, shardcat_samples

GOLDEN = Path(__file__).parents[2] / "data" / "tar"
LONG_DIR = "d" * 120
LONG_BASE = "k" * 130


def _members() -> list[tuple[str, bytes]]:
    return [
        (f"{LONG_DIR}/0001.jpg", b"jpeg" * 40),
        (f"{LONG_DIR}/0001.cls", b"3"),
        (f"short/{LONG_BASE}.txt", b"a key of 136 bytes"),
        (f"short/{LONG_BASE}.seg.png", bytes(range(256)) * 3),
        ("0003.json", b'{"x": 1}'),
        ("0003.JPG", b"upper-case extension"),
    ]


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT], ids=["gnu", "pax"])
def test_names_over_100_bytes(fmt):
    data = make_tar(_members(), fmt=fmt)
    assert (b"././@LongLink" in data) == (fmt == tarfile.GNU_FORMAT)
    got = read_back(data)
    assert got == wds_samples(io.BytesIO(data))
    assert [s["__key__"] for s in got] == [f"{LONG_DIR}/0001", f"short/{LONG_BASE}", "0003"]
    # Entry names are lower-cased, as webdataset does.
    assert got[2] == {"__key__": "0003", "json": b'{"x": 1}', "jpg": b"upper-case extension"}


def test_ustar_prefix_names():
    # 150 bytes, splittable into the 155-byte prefix and the 100-byte name.
    name = "p" * 90 + "/" + "q" * 50 + "/0001.bin"
    data = make_tar([(name, b"payload")], fmt=tarfile.USTAR_FORMAT)
    assert b"@LongLink" not in data and b"path=" not in data
    assert read_back(data) == [{"__key__": name[:-4], "bin": b"payload"}]


def _special_members() -> list[tarfile.TarInfo]:
    out = []
    d = tarfile.TarInfo("dir")
    d.type = tarfile.DIRTYPE
    out.append(d)
    link = tarfile.TarInfo("dir/0009.jpg")
    link.type = tarfile.SYMTYPE
    link.linkname = "t" * 150  # a long link target: GNU 'K', pax linkpath
    out.append(link)
    hard = tarfile.TarInfo("dir/0010.jpg")
    hard.type = tarfile.LNKTYPE
    hard.linkname = "dir/0001.jpg"
    out.append(hard)
    fifo = tarfile.TarInfo("dir/fifo.x")
    fifo.type = tarfile.FIFOTYPE
    out.append(fifo)
    return out


@pytest.mark.parametrize(
    "fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT], ids=str
)
def test_directories_links_and_fifos_are_skipped(fmt):
    regular = [("dir/0001.jpg", b"j"), ("dir/0001.cls", b"c"), ("dir/README", b"no key")]
    extra = _special_members() if fmt != tarfile.USTAR_FORMAT else _special_members()[:1]
    data = make_tar(regular, fmt=fmt, extra=extra)
    info = scan_bytes(data)
    assert info.keys == ["dir/0001"]
    assert info.member_count == 3 + len(extra)
    assert info.skipped == 1 + len(extra)  # README has no key; the rest are not files
    assert read_back(data) == wds_samples(io.BytesIO(data))


def test_a_pax_size_overrides_the_header_size():
    # tarfile writes a pax 'size' only past 8 GiB; make one by hand: the ustar
    # size field says 0, the pax record says 5 (what tar does for huge members).
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("0001.bin")
        info.size = 5
        info.pax_headers = {"size": "5"}
        tar.addfile(info, io.BytesIO(b"hello"))
        tail = tarfile.TarInfo("0002.bin")
        tail.size = 3
        tar.addfile(tail, io.BytesIO(b"end"))
    data = bytearray(buf.getvalue())
    header = data.index(b"0001.bin\0", 512) // 512 * 512
    data[header + 124 : header + 136] = b"00000000000\0"
    data[header + 148 : header + 156] = b" " * 8
    data[header + 148 : header + 156] = b"%06o\0 " % sum(data[header : header + 512])
    got = read_back(bytes(data))
    assert got == [{"__key__": "0001", "bin": b"hello"}, {"__key__": "0002", "bin": b"end"}]
    assert got == wds_samples(io.BytesIO(bytes(data)))


def test_pax_sparse_members_are_skipped_and_other_pax_records_ignored():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        sparse = tarfile.TarInfo("0001.bin")
        sparse.size = 4
        sparse.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0"}
        tar.addfile(sparse, io.BytesIO(b"map!"))
        plain = tarfile.TarInfo("0002.bin")
        plain.size = 2
        plain.pax_headers = {"comment": "not about data", "mtime": "1.5"}
        tar.addfile(plain, io.BytesIO(b"ok"))
    info = scan_bytes(buf.getvalue())
    assert info.keys == ["0002"] and info.skipped == 1 and info.member_count == 2
    assert read_back(buf.getvalue()) == [{"__key__": "0002", "bin": b"ok"}]


def test_gnu_base256_sizes_are_read():
    # GNU tar and tarfile write sizes >= 8 GiB in base-256; fake one for a small member.
    data = bytearray(make_tar([("0001.bin", b"abc"), ("0002.bin", b"z")], fmt=tarfile.GNU_FORMAT))
    data[124:136] = b"\x80" + (3).to_bytes(11, "big")
    data[148:156] = b" " * 8
    data[148:156] = b"%06o\0 " % sum(data[:512])
    assert read_back(bytes(data)) == [
        {"__key__": "0001", "bin": b"abc"},
        {"__key__": "0002", "bin": b"z"},
    ]


GNU_TAR_KEYS = [
    "ds/0001",
    "ds/" + "a-directory-name-long-enough-that-the-member-path-is-well-over-one-hundred-bytes-"
    "long-in-total/0004-" + "b" * 110,
    "ds/a-directory-name-long-enough-that-the-member-path-is-well-over-one-hundred-bytes-"
    "long-in-total/deeper/0002",
    "ds/ünïcode-0005",
]


@pytest.mark.parametrize("name", ["gnu-longnames.tar", "posix-longnames.tar"])
def test_golden_tars_written_by_gnu_tar(name):
    path = GOLDEN / name
    info = scan_tar(path)
    assert info.keys == GNU_TAR_KEYS
    # ds, three directories, the symlink, README.
    assert info.skipped == 6
    got = shardcat_samples(FileSource(path), info)
    assert got == wds_samples(path)
    assert got[0] == {
        "__key__": "ds/0001",
        "cls": b"cat",
        "jpg": b"\xff\xd8\xff\xe0fake jpeg bytes",
        "json": b'{"w": 640}',
    }
    assert got[2]["seg.png"] == b"x" * 3000
    assert got[3]["txt"] == "grüße".encode()


@pytest.mark.skipif(shutil.which("tar") is None, reason="no tar command on PATH")
@pytest.mark.parametrize("fmt", ["gnu", "posix", "ustar"])
def test_tars_made_now_by_the_tar_command(tmp_path, fmt):
    src = tmp_path / "src"
    (src / ("n" * 60) / ("m" * 60)).mkdir(parents=True)
    for i in range(30):
        folder = src / ("n" * 60) / ("m" * 60) if i % 2 else src
        (folder / f"{i:04d}.jpg").write_bytes(bytes([i]) * (i * 97))
        (folder / f"{i:04d}.txt").write_text(f"sample {i}")
    out = tmp_path / f"{fmt}.tar"
    subprocess.run(
        ["tar", f"--format={fmt}", "--sort=name", "-C", str(src), "-cf", str(out), "."],
        check=True,
        capture_output=True,
    )
    info = scan_tar(out)
    assert info.record_count == 30
    assert shardcat_samples(FileSource(out), info) == wds_samples(out)


def test_split_member_name_follows_webdataset():
    from webdataset.tariterators import base_plus_ext

    names = [
        "a.jpg",
        "dir/a.b.c",
        "dir.x/a.jpg",
        "dir/.hidden.jpg",
        ".a.jpg",
        "noext",
        "dir/noext",
        "a.",
        "a.JPG",
        "x/y/z/0001.seg.PNG",
        "__meta__",
        "__dir__/a.jpg",
        "d/__k__.jpg",
        "line\nbreak.jpg",
    ]
    for name in names:
        key, ext = base_plus_ext(name)
        meta = name.startswith("__") and ("/" not in name or name.startswith("__dir__/"))
        want = None if key is None or not ext or meta else (key, ext.lower())
        assert split_member_name(name) == want, name


_key = st.text("abcXYZ019_-/", min_size=1, max_size=140).filter(
    lambda k: not k.startswith("/") and "//" not in k and not k.endswith("/")
)
_ext = st.sampled_from(["jpg", "png", "json", "cls", "seg.png", "txt", "npy"])


@st.composite
def _tar_members(draw: st.DrawFn) -> list[tuple[str, bytes]]:
    keys = draw(st.lists(_key, min_size=0, max_size=12, unique=True))
    members = []
    for key in keys:
        if split_member_name(f"{key}.jpg") != (key, "jpg"):
            continue  # a key whose basename starts with '__' or the like
        for ext in draw(st.lists(_ext, min_size=1, max_size=4, unique=True)):
            members.append((f"{key}.{ext}", draw(st.binary(max_size=1500))))
    return members


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    members=_tar_members(),
    fmt=st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
    chunk=st.sampled_from([2048, 4096, 1 << 20]),
)
def test_random_member_sets_round_trip(members, fmt, chunk):
    data = make_tar(members, fmt=fmt)
    got = read_back(data, chunk_size=chunk)
    assert got == wds_samples(io.BytesIO(data))
    flat = [(f"{s['__key__']}.{n}", v) for s in got for n, v in s.items() if n != "__key__"]
    assert flat == members
