"""Generated and damaged tars for the differential fuzzer of the tar walk and grouping.

:func:`case` builds one tar from ``(seed, number)`` alone (so any case of a
long run replays by itself): V7, ustar, old-GNU and pax headers written
field by field, GNU long names and links, pax local and global headers
(path, size, sparse markers, malformed records), directories of every style
(type ``'5'``, a V7 type-NUL name ending in ``/``, each with and without a
size), links, devices, sparse and unknown types, names off WebDataset's
plain path, non-adjacent and duplicate sample members, numbers in every
encoding tar readers meet (octal with NUL or space, no terminator, base-256,
and some only Python's ``int`` reads), checksums in every accepted form and
a few wrong ones, zero blocks in the middle and trailing bytes; then, for
most cases, damage: header fields changed and the checksum fixed again, header
blocks copied over others, blocks inserted or deleted, bytes flipped, cuts.

:func:`outcome` is what a walker makes of a tar: every member of the walk
and every row of the scan, or the error (type, message, offset).
"""

from __future__ import annotations

import io
import random
import tarfile
from dataclasses import dataclass, field
from typing import Any

from shardcat.errors import ShardcatError
from shardcat.format.tar import iter_tar_samples, scan_tar, tarwalker
from shardcat.format.tar.walk import TarWalker
from shardcat.testing.mutations import mutate

BLOCK = 512


# --- header fields ---------------------------------------------------------------


def size_field(rng: random.Random, size: int, style: str | None = None) -> bytes:
    """``size`` in one of the 12-byte encodings tar readers meet (some only Python reads)."""
    style = (
        style
        or rng.choices(
            ["oct11", "oct11sp", "oct12", "lead", "short", "b256", "plus", "under", "tab", "junk"],
            [60, 6, 4, 4, 4, 6, 2, 2, 2, 0.3],
        )[0]
    )
    if style == "oct11sp":
        out = b"%011o " % size
    elif style == "oct12":
        out = b"%012o" % size if size < 8**12 else b"%011o\0" % size
    elif style == "lead":
        out = b"%11o\0" % size
    elif style == "short":
        out = (b"%o\0" % size).ljust(12, b"\0")
    elif style == "b256":
        out = b"\x80" + size.to_bytes(11, "big")
    elif style == "plus":
        out = b"+%010o\0" % size
    elif style == "under":
        digits = b"%010o" % size
        out = digits[:5] + b"_" + digits[5:] + b"\0"
    elif style == "tab":
        out = b"\t%010o\0" % size
    elif style == "junk":
        out = rng.choice([b"\xff" * 12, b"0000000001 2", b"-0000000001\0", b"00000000x12\0"])
    else:
        out = b"%011o\0" % size
    return out[:12].ljust(12, b"\0")


def set_checksum(h: bytearray, rng: random.Random, style: str | None = None) -> None:
    """Write the header's checksum in one of the forms readers accept (or, rarely, a wrong one)."""
    style = (
        style
        or rng.choices(
            ["std", "seven", "spaces", "lead", "signed", "b256", "bad"], [80, 4, 4, 3, 4, 2, 0.4]
        )[0]
    )
    h[148:156] = b" " * 8
    unsigned = sum(h)
    signed = sum(b - 256 if b > 127 else b for b in h)
    if style == "seven":
        value = b"%07o\0" % unsigned
    elif style == "spaces":
        value = b"%06o  " % unsigned
    elif style == "lead":
        value = b" %06o\0" % unsigned
    elif style == "signed" and signed >= 0:
        value = b"%06o\0 " % signed
    elif style == "b256":
        value = b"\x80" + unsigned.to_bytes(7, "big")
    elif style == "bad":
        value = b"%06o\0 " % (unsigned + rng.randint(1, 9))
    else:
        value = b"%06o\0 " % unsigned
    h[148:156] = value[:8].ljust(8, b"\0")


def header(
    rng: random.Random,
    name: bytes,
    kind: bytes,
    size: int,
    *,
    style: str,
    prefix: bytes = b"",
    linkname: bytes = b"",
    size_bytes: bytes | None = None,
) -> bytes:
    """One 512-byte header: ``style`` is ``v7`` (no magic), ``ustar`` or ``gnu``."""
    h = bytearray(BLOCK)
    h[0:100] = name[:100].ljust(100, b"\0")
    h[100:108] = b"0000644\0"
    h[108:116] = b"0001750\0"
    h[116:124] = b"0001750\0"
    h[124:136] = size_bytes if size_bytes is not None else size_field(rng, size)
    h[136:148] = b"%011o\0" % 1_700_000_000
    h[156:157] = kind
    h[157:257] = linkname[:100].ljust(100, b"\0")
    if style == "ustar":
        h[257:263] = b"ustar\0"
        h[263:265] = b"00"
        h[345:500] = prefix[:155].ljust(155, b"\0")
    elif style == "gnu":
        h[257:263] = b"ustar "
        h[263:265] = b" \0"
    if style != "v7":
        h[265:297] = b"user".ljust(32, b"\0")
        h[297:329] = b"group".ljust(32, b"\0")
    set_checksum(h, rng)
    return bytes(h)


def pax_record(key: bytes, value: bytes) -> bytes:
    body = b" " + key + b"=" + value + b"\n"
    n = len(body) + 1
    while len(str(n)) + len(body) != n:
        n = len(str(n)) + len(body)
    return str(n).encode() + body


def bad_pax_record(rng: random.Random) -> bytes:
    return rng.choice(
        [
            b"99 path=x\n",  # runs past the data
            b"12 pathx.txt\n",  # no '='
            b"10 path=ab",  # no newline
            b"0 path=\n",
            b"x7 size=1\n",
            b"+11 size=5\n",  # Python's int reads '+11'
            b"9 size=\n",
            b"13 size= 12\n",
            b"12 size=-5\n",
            b"14 size=1_000\n",
            b"30 size=99999999999999999999\n",
        ]
    )


# --- the archive -------------------------------------------------------------------


@dataclass
class Tar:
    """A tar being built: its bytes and where each header block starts."""

    rng: random.Random
    parts: list[bytes] = field(default_factory=list)
    headers: list[int] = field(default_factory=list)
    pos: int = 0

    def block(self, h: bytes) -> None:
        self.headers.append(self.pos)
        self.add(h)

    def add(self, data: bytes) -> None:
        self.parts.append(data)
        self.pos += len(data)

    def payload(self, data: bytes) -> None:
        """``data`` padded with NULs to whole blocks."""
        self.add(data + bytes(-len(data) % BLOCK))

    def bytes(self) -> bytes:
        return b"".join(self.parts)


KEYS = [f"k{i:02d}" for i in range(12)]
EXTS = ["jpg", "cls", "JSON", "seg.png", "txt", "Jpg"]
ODD_NAMES = [
    b"__meta__.json",
    b"d/__key__.txt",
    b"_hidden.jpg",
    b"noext",
    b"trailing.",
    b"new\nline.jpg",
    b"k\xff.jpg",
    b"a/b.c/d.txt",
    b".hidden",
    b"a..b",
    "ünï/cödé.jpg".encode(),
    b"d/",
    b"",
    b"/",
    b"x/.jpg",
]


def _name(rng: random.Random, key: str, ext: str) -> bytes:
    folder = rng.choice(["", "d/", "deep/er/", "x" * rng.randint(90, 160) + "/"])
    return f"{folder}{key}.{ext}".encode()


def _extension_headers(t: Tar, name: bytes, style: str, size: int) -> tuple[bytes, bytes | None]:
    """Long-name or pax headers in front of a member of ``size`` bytes; returns the name its
    own header keeps, and its size field when a pax size record says the size (it may lie)."""
    rng = t.rng
    roll = rng.random()
    if roll < 0.12 or (len(name) > 100 and style == "gnu" and roll < 0.5):
        data = name + (b"\0" if rng.random() < 0.8 else b"")
        data += b"junk" if rng.random() < 0.1 else b""
        t.block(header(rng, b"././@LongLink", b"L", len(data), style="gnu"))
        t.payload(data)
        if rng.random() < 0.1:  # a long link name too (ignored for regular members)
            t.block(header(rng, b"././@LongLink", b"K", 20, style="gnu"))
            t.payload(b"l" * 20)
        return name[:100], None
    if roll < 0.35 or (len(name) > 100 and roll < 0.6):
        records = []
        if rng.random() < 0.8:
            value = name + (b"\0tail" if rng.random() < 0.05 else b"")  # a NUL inside a path
            records.append(pax_record(b"path", value))
        if rng.random() < 0.7:
            records.append(pax_record(b"mtime", b"1700000000.5"))
        own_size = None
        if rng.random() < 0.15:
            records.append(pax_record(b"size", str(size).encode()))
            own_size = size_field(rng, rng.choice([0, size, 7]))
        if rng.random() < 0.05:
            records.append(pax_record(b"GNU.sparse.major", b"1"))
        if rng.random() < 0.02:
            records.append(bad_pax_record(rng))
        if rng.random() < 0.05:
            records.append(pax_record(b"comment", rng.randbytes(rng.randint(0, 40))))
        rng.shuffle(records)
        data = b"".join(records)
        if rng.random() < 0.03:
            data += b"\0garbage"
        t.block(header(rng, b"./PaxHeaders/" + name[:80], b"x", len(data), style="ustar"))
        t.payload(data)
        return (name[:100] if rng.random() < 0.7 else b"placeholder"), own_size
    return name, None


def _member(t: Tar, name: bytes, data: bytes, style: str) -> None:
    """A regular member (type '0', NUL or '7') with its extension headers."""
    rng = t.rng
    kind = rng.choices([b"0", b"\0", b"7"], [80, 15, 5])[0]
    own, size_bytes = _extension_headers(t, name, style, len(data))
    prefix = b""
    if style == "ustar" and len(own) > 100:
        cut = own.rfind(b"/", 0, len(own) - 1)
        if 0 < cut <= 155 and len(own) - cut - 1 <= 100:
            prefix, own = own[:cut], own[cut + 1 :]
    t.block(header(rng, own, kind, len(data), style=style, prefix=prefix, size_bytes=size_bytes))
    t.payload(data)


def _other(t: Tar, style: str) -> None:
    """A member that is no regular file: a directory of some style, a link, a device, ..."""
    rng = t.rng
    kind = rng.choice(
        ["dir5", "v7dir", "v7dir", "zerodir", "link", "dev", "sparse", "other", "paxdir", "gnudir"]
    )
    size = rng.choice([0, 0, 1, 511, 512, 513, 1024, 3000])
    if kind == "dir5":
        t.block(header(rng, b"d/sub/", b"5", size, style=style))
        if rng.random() < 0.3:
            t.payload(rng.randbytes(size))  # a size the reader must ignore
    elif kind == "v7dir":
        # An old-style directory: type NUL, name ending in '/', maybe a (bogus) size.
        name = rng.choice([b"d/", b"dir/", b"a/b/", b"k00.jpg/", b"/"])
        t.block(header(rng, name, b"\0", size, style=rng.choice(["v7", "gnu", "ustar"])))
        if rng.random() < 0.5:
            t.payload(rng.randbytes(size))
    elif kind == "zerodir":
        # A ustar directory whose name is all prefix: the name field is empty.
        t.block(header(rng, b"", b"\0", size, style="ustar", prefix=b"some/dir"))
    elif kind == "paxdir":
        rec = pax_record(b"path", b"long/" * 30)
        t.block(header(rng, b"./PaxHeaders/d", b"x", len(rec), style="ustar"))
        t.payload(rec)
        t.block(header(rng, b"placeholder", rng.choice([b"\0", b"5"]), size, style="ustar"))
        if rng.random() < 0.5:
            t.payload(rng.randbytes(size))
    elif kind == "gnudir":
        data = b"g" * 120 + b"/\0"
        t.block(header(rng, b"././@LongLink", b"L", len(data), style="gnu"))
        t.payload(data)
        t.block(header(rng, b"g" * 99, b"\0", size, style="gnu"))
    elif kind == "link":
        if rng.random() < 0.3:
            t.block(header(rng, b"././@LongLink", b"K", 150, style="gnu"))
            t.payload(b"t" * 150)
        t.block(
            header(
                rng, b"d/link", rng.choice([b"1", b"2"]), size, style=style, linkname=b"d/k00.jpg"
            )
        )
    elif kind == "dev":
        t.block(header(rng, b"dev/x", rng.choice([b"3", b"4", b"6"]), size, style=style))
    elif kind == "sparse":
        if rng.random() < 0.5:
            recs = pax_record(b"GNU.sparse.major", b"1") + pax_record(b"GNU.sparse.name", b"s.bin")
            t.block(header(rng, b"./PaxHeaders/s", b"x", len(recs), style="ustar"))
            t.payload(recs)
            t.block(header(rng, b"s.bin", b"0", size, style="ustar"))
        else:
            t.block(header(rng, b"s.bin", b"S", size, style="gnu"))
        t.payload(rng.randbytes(size))
    else:
        t.block(
            header(
                rng, b"v.bin", rng.choice([b"D", b"V", b"M", b"N", b"Z", b"A"]), size, style=style
            )
        )
        t.payload(rng.randbytes(size))


def _global(t: Tar) -> None:
    rng = t.rng
    recs = []
    if rng.random() < 0.6:
        recs.append(pax_record(b"path", rng.choice([b"g/0.txt", b"g/", b"glob.jpg"])))
    recs.append(pax_record(b"comment", b"global"))
    data = b"".join(recs)
    t.block(header(rng, b"././@PaxHeader", b"g", len(data), style="ustar"))
    t.payload(data)


def generated(rng: random.Random) -> Tar:
    """A tar of WebDataset-like samples, written header by header."""
    t = Tar(rng)
    style = rng.choice(["v7", "ustar", "gnu"])
    samples = rng.randint(0, 10)
    used: list[str] = []
    for _ in range(samples):
        if rng.random() < 0.1:
            _other(t, style)
        if rng.random() < 0.03:
            _global(t)
        if rng.random() < 0.05:
            _member(t, rng.choice(ODD_NAMES), rng.randbytes(rng.randint(0, 600)), style)
            continue
        # Mostly a fresh key; sometimes one seen before (a split sample).
        key = (
            rng.choice(used) if used and rng.random() < 0.04 else rng.choice(KEYS) + f"_{len(used)}"
        )
        used.append(key)
        exts = rng.sample(EXTS, rng.randint(1, 3))
        if rng.random() < 0.04:
            exts.append(exts[0])  # a repeated entry name
        for ext in exts:
            size = rng.choice([0, 1, 511, 512, 513, rng.randint(0, 2000)])
            _member(t, _name(rng, key, ext), rng.randbytes(size), style)
    roll = rng.random()
    if roll < 0.03 and t.headers:
        t.add(bytes(BLOCK))  # a zero block in the middle: the end, for the reader
        _member(t, b"after/end.jpg", b"x" * 10, style)
    ends = rng.choices([0, 1, 2, 2], [3, 3, 47, 47])[0]
    t.add(bytes(BLOCK * ends))
    if rng.random() < 0.3:
        t.add(bytes((-t.pos) % 10240))  # record padding, as tarfile writes it
    if rng.random() < 0.05:
        t.add(rng.randbytes(rng.randint(1, 700)))
    return t


def from_tarfile(rng: random.Random) -> Tar:
    """A tar written by Python's tarfile (directories, links, long names in its own ways)."""
    buf = io.BytesIO()
    fmt = rng.choice([tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for i in range(rng.randint(0, 8)):
            if rng.random() < 0.2:
                long_dir = "x" * 120 if fmt != tarfile.USTAR_FORMAT else "x/" * 60
                info = tarfile.TarInfo(rng.choice(["d", "d/sub", long_dir]))
                info.type = rng.choice([tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.FIFOTYPE])
                info.linkname = "d/k.jpg" if info.type == tarfile.SYMTYPE else ""
                tar.addfile(info)
            long = "L" * rng.choice([0, 0, 120]) + "/" if fmt != tarfile.USTAR_FORMAT else ""
            for ext in rng.sample(EXTS, rng.randint(1, 2)):
                info = tarfile.TarInfo(f"{long}s{i:03d}.{ext}")
                data = rng.randbytes(rng.randint(0, 1500))
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    t = Tar(rng)
    t.add(data)
    # Header positions: walk the blocks tarfile wrote (a good enough guess for mutations).
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            t.headers.append(member.offset)
    return t


# --- damage ------------------------------------------------------------------------


def _refield(data: bytearray, at: int, rng: random.Random) -> str:
    """Change one field of the header at ``at`` and write its checksum again."""
    h = bytearray(data[at : at + BLOCK])
    if len(h) < BLOCK:
        return "header cut; unchanged"
    what = rng.choice(["type", "type", "size", "size", "slash", "name", "magic", "prefix", "zero"])
    if what == "type":
        h[156] = rng.choice(b"0\x0057x gLKS12D")
    elif what == "size":
        h[124:136] = size_field(rng, rng.choice([0, 1, 512, 1024, 5000, rng.randint(0, 1 << 20)]))
    elif what == "slash":
        cut = h.find(0, 0, 100)
        cut = 99 if cut < 0 else cut
        h[cut] = ord("/")
        if rng.random() < 0.7:
            h[156] = 0
    elif what == "name":
        h[0:100] = rng.choice([*ODD_NAMES, b"k01.jpg", b"k01.cls"]).ljust(100, b"\0")[:100]
    elif what == "magic":
        h[257:265] = rng.choice([b"ustar\x0000", b"ustar  \0", bytes(8)])
    elif what == "prefix":
        h[345:500] = rng.choice([b"", b"pre/fix", b"p" * 155]).ljust(155, b"\0")
    else:
        h[:] = bytes(BLOCK)
    if what != "zero":
        set_checksum(h, rng, "std")
    data[at : at + BLOCK] = h
    return f"{what} of the header at {at}"


def damaged(t: Tar, rng: random.Random) -> tuple[bytes, list[str]]:
    """The tar with one to three kinds of damage, and what was done."""
    data = bytearray(t.bytes())
    done: list[str] = []
    for _ in range(rng.randint(1, 3)):
        if not data:
            break
        headers = [h for h in t.headers if h + BLOCK <= len(data)] or [0]
        kind = rng.choices(
            ["refield", "copy", "insert", "delete", "raw", "cut"], [40, 12, 8, 8, 24, 8]
        )[0]
        if kind == "refield":
            done.append(_refield(data, rng.choice(headers), rng))
        elif kind == "copy" and len(headers) > 1:
            a, b = rng.sample(headers, 2)
            data[b : b + BLOCK] = data[a : a + BLOCK]
            done.append(f"header at {a} copied over {b}")
        elif kind == "insert":
            at = rng.choice(headers)
            block = rng.choice(
                [bytes(BLOCK), data[rng.choice(headers) :][:BLOCK], rng.randbytes(BLOCK)]
            )
            data[at:at] = block
            done.append(f"a block inserted at {at}")
        elif kind == "delete":
            at = rng.choice(headers)
            del data[at : at + BLOCK * rng.randint(1, 2)]
            done.append(f"blocks deleted at {at}")
        elif kind == "cut":
            at = rng.randrange(len(data) + 1)
            del data[at:]
            done.append(f"cut at {at}")
        elif len(data) >= 16:
            structured = [(h, h + BLOCK) for h in headers]
            kinds = ["flip", "splice", "ff_run", "zero_run", "swap", "insert", "delete", "truncate"]
            out, detail = mutate(bytes(data), rng.choice(kinds), rng, structured=structured)
            data = bytearray(out)
            done.append(detail)
    return bytes(data), done


def case(seed: int, number: int) -> tuple[bytes, dict[str, Any], list[str]]:
    """Case ``number`` of ``seed``: the tar's bytes, the walk's options and the damage done."""
    rng = random.Random(f"tar-fuzz:{seed}:{number}")
    t = from_tarfile(rng) if rng.random() < 0.15 else generated(rng)
    data = t.bytes()
    done: list[str] = []
    if rng.random() < 0.7:
        data, done = damaged(t, rng)
    options = {
        "chunk_size": rng.choice([2048, 2048, 4096, 8192, 1 << 20]),
        "size": len(data) if rng.random() < 0.3 else None,
    }
    return data, options, done


# --- what a walker makes of a tar -----------------------------------------------------


@dataclass(frozen=True)
class Raised:
    """A walk or scan that raised: the error's type, message and offset."""

    kind: str
    message: str
    offset: Any


def _raised(e: ShardcatError) -> Raised:
    return Raised(type(e).__name__, str(e), getattr(e, "offset", None))


def outcome(data: bytes, walker: str, options: dict[str, Any], *, samples: bool) -> dict[str, Any]:
    """The walk's members and the scan's rows (or their errors) under tar walker ``walker``."""
    previous = tarwalker.use(walker)
    out: dict[str, Any] = {}
    common = {"readahead": 0, "map_file": False, **options}
    try:
        w = TarWalker(io.BytesIO(data), "fuzz.tar", **common)
        try:
            members = [m for batch in w for m in zip(*batch)]
            out["walk"] = (members, w.size, w.end_offset, w.member_count, w.skipped)
        except ShardcatError as e:
            out["walk"] = _raised(e)
        try:
            info = scan_tar(io.BytesIO(data), "fuzz.tar", **common)
            out["scan"] = (
                info.keys,
                info.records.tobytes(),
                info.entries.tobytes(),
                [s.name for s in info.specs],
                info.size,
                info.end_offset,
                info.member_count,
                info.skipped,
            )
        except ShardcatError as e:
            out["scan"] = _raised(e)
        if samples:
            try:
                out["samples"] = list(iter_tar_samples(io.BytesIO(data), "fuzz.tar", **common))
            except ShardcatError as e:
                out["samples"] = _raised(e)
    finally:
        tarwalker.use(previous)
    return out


def compare(compiled: Any, reference: Any) -> str | None:
    """How the compiled result differs from the reference's, or ``None`` when it does not.

    ``"accepts-less"``: the reference raised, the compiled side did not (never allowed);
    ``"different"``: both accepted, with different results; ``"different-error"``: both
    raised, differently; ``"rejects-more"``: the compiled side raised where the reference
    accepted (the C sources' rule allows it).
    """
    if compiled == reference:
        return None
    c_err, r_err = isinstance(compiled, Raised), isinstance(reference, Raised)
    if r_err and not c_err:
        return "accepts-less"
    if c_err and not r_err:
        return "rejects-more"
    return "different-error" if c_err else "different"
