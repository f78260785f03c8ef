"""Regenerate the worked example of docs/FORMAT.md from the real writer.

Usage (from the repository root)::

    .venv/bin/python docs/tools/format_example.py            # print the example (Markdown)
    .venv/bin/python docs/tools/format_example.py --check    # exit 1 if FORMAT.md is stale
    .venv/bin/python docs/tools/format_example.py --update   # rewrite the example in FORMAT.md
    .venv/bin/python docs/tools/format_example.py --out x.shard   # also save the shard

``--check`` also compares every offset table of FORMAT.md (offset, size, type,
field) with the numpy dtypes of ``shardcat.format.spec``.

The shard is written by ``shardcat.format.ShardWriter`` with a fixed clock and
file id, so its bytes depend only on the format and on the writer's version
string (stored in the footer metadata). The annotation decodes the bytes with
the layouts of ``shardcat.format.spec`` and asserts that every CRC covers
exactly the byte range FORMAT.md says it covers.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import io
import sys
from pathlib import Path

from shardcat.format import ShardReader, ShardWriter
from shardcat.format.checksums import crc32c, key_hash, signed_key_hash
from shardcat.format.spec import (
    ENTRY_DESC_DTYPE,
    ENTRY_ROW_DTYPE,
    HEADER_DTYPE,
    HEADER_SIZE,
    RECORD_HEAD_DTYPE,
    RECORD_ROW_DTYPE,
    TRAILER_DTYPE,
    TRAILER_SIZE,
    Codec,
    align_up,
    footer_layout,
)

DOC = Path(__file__).resolve().parents[1] / "FORMAT.md"
BEGIN = "<!-- BEGIN format_example.py output -->"
END = "<!-- END format_example.py output -->"

SAMPLES = [
    ("cat/0001", {"txt": "meow", "json": {"label": 3}}),
    ("cat/0002", {"txt": "purr", "json": {"label": 5}}),
]


def build() -> bytes:
    buf = io.BytesIO()
    with ShardWriter(
        buf,
        alignment=8,
        shard_number=5,
        metadata={"split": "demo"},
        clock=lambda: 1_700_000_000_000_000_000,  # nanoseconds
        file_id=bytes(range(16)),
    ) as w:
        for key, entries in SAMPLES:
            w.add(key, entries)
    return buf.getvalue()


def need(ok: bool, what: str) -> None:
    """Fail loudly (also under ``python -O``) when the bytes contradict FORMAT.md."""
    if not ok:
        raise SystemExit(f"format_example.py: check failed: {what}")


class Dump:
    """Lines of ``offset  hex  field = value``, at most 16 bytes per line."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.lines: list[str] = []

    def title(self, text: str) -> None:
        if self.lines:
            self.lines.append("")
        self.lines.append(f"-- {text}")

    def field(self, size: int, label: str, text: bool = False) -> bytes:
        raw = self.data[self.pos : self.pos + size]
        for i in range(0, max(size, 1), 16):
            chunk = raw[i : i + 16]
            if not chunk:
                break
            note = label if i == 0 else ""
            if text:
                ascii_ = "".join(chr(c) if 32 <= c < 127 else "." for c in chunk)
                note = f"|{ascii_}|" + (f"  {label}" if i == 0 else "")
            self.lines.append(f"{self.pos + i:08x}  {chunk.hex(' '):<47}  {note}".rstrip())
        self.pos += size
        return raw

    def struct(self, dtype, prefix: str = "") -> dict[str, object]:  # noqa: ANN001
        values: dict[str, object] = {}
        start = self.pos
        for name in dtype.names:
            ftype, offset = dtype.fields[name][:2]
            need(self.pos == start + offset, f"{prefix}{name} at +{offset}")
            raw = self.data[self.pos : self.pos + ftype.itemsize]
            if ftype.kind in "SV":
                value: object = raw
                shown = repr(raw) if name in ("magic", "tag") else raw.hex()
                if name == "reserved":
                    need(raw == bytes(len(raw)), f"{prefix}{name} is zero")
                    shown = "(zero)"
            else:
                value = int.from_bytes(raw, "little", signed=ftype.kind == "i")
                shown = str(value)
                if name in ("codec", "default_codec"):
                    shown = f"{value} ({Codec(value).label})"
                elif name == "created_us":
                    when = dt.datetime.fromtimestamp(value / 1e6, tz=dt.timezone.utc)
                    shown = f"{value} µs = {when:%Y-%m-%dT%H:%M:%SZ}"
                elif "crc" in name or "hash" in name:
                    shown = f"{value:#0{2 + 2 * ftype.itemsize}x}"
            values[name] = value
            self.field(ftype.itemsize, f"+{offset:<3} {prefix}{name} = {shown}")
        return values


def annotate(data: bytes) -> str:
    d = Dump(data)
    crcs: list[tuple[str, str, int]] = []

    def check(name: str, rng: str, stored: int, start: int, end: int) -> None:
        actual = crc32c(data[start:end])
        need(actual == stored, f"{name}: stored {stored:#010x}, crc32c({rng}) = {actual:#010x}")
        crcs.append((name, rng, stored))

    # header
    d.title(f"header [0, {HEADER_SIZE})")
    h = d.struct(HEADER_DTYPE)
    check("header_crc", "file bytes [0, 60)", h["header_crc"], 0, 60)
    align = int(h["alignment"])

    # trailer first, to know where the data region ends
    t_at = len(data) - TRAILER_SIZE
    t = {}
    for name in TRAILER_DTYPE.names[:-1]:  # all but the magic
        ftype, offset = TRAILER_DTYPE.fields[name][:2]
        t[name] = int.from_bytes(data[t_at + offset : t_at + offset + ftype.itemsize], "little")
    footer_offset = t["footer_offset"]

    # records
    index = 0
    while d.pos < footer_offset:
        rec_at = d.pos
        length = int.from_bytes(data[rec_at + 8 : rec_at + 16], "little")
        d.title(f"record {index} [{rec_at}, {rec_at + length}): head (32 B)")
        r = d.struct(RECORD_HEAD_DTYPE)
        head_end = rec_at + r["head_length"]
        rng = f"record bytes [8, {r['head_length']}) = file bytes [{rec_at + 8}, {head_end})"
        check(f"record {index} head_crc", rng, r["head_crc"], rec_at + 8, head_end)
        descs = []
        for j in range(r["entry_count"]):
            d.title(f"record {index} entry descriptor {j} (32 B)")
            descs.append(d.struct(ENTRY_DESC_DTYPE))
        d.title(f"record {index} strings: key, then name and content type of each entry")
        key = d.field(r["key_length"], "key", text=True)
        need(r["key_hash"] == key_hash(key), "key_hash is xxh64 of the key")
        for j, e in enumerate(descs):
            d.field(e["name_length"], f"entry {j} name", text=True)
            d.field(e["type_length"], f"entry {j} content type", text=True)
        pad = rec_at + r["head_length"] - d.pos
        if pad:
            need(data[d.pos : d.pos + pad] == bytes(pad), "padding is zero")
            d.field(pad, f"zero padding to head_length = {r['head_length']}")
        for j, e in enumerate(descs):
            d.title(f"record {index} payload {j} (record offset {e['payload_offset']})")
            at = rec_at + e["payload_offset"]
            need(d.pos == at, "payloads follow each other in order")
            d.field(e["stored_size"], "payload", text=True)
            check(
                f"record {index} payload {j} payload_crc",
                f"file bytes [{at}, {at + e['stored_size']})",
                e["payload_crc"],
                at,
                at + e["stored_size"],
            )
            pad = align_up(e["stored_size"], align) - e["stored_size"]
            if pad:
                need(data[d.pos : d.pos + pad] == bytes(pad), "padding is zero")
                d.field(pad, f"zero padding to a multiple of {align}")
        need(d.pos == rec_at + r["record_length"], "record ends after its last padding")
        index += 1
    check(
        "data_crc", f"file bytes [64, {footer_offset})", t["data_crc"], HEADER_SIZE, footer_offset
    )

    # footer
    *_, pad_at, total = footer_layout(
        t["record_count"], t["entry_count"], t["keys_length"], t["metadata_length"]
    )
    for i in range(t["record_count"]):
        d.title(f"footer record row {i} (32 B)")
        d.struct(RECORD_ROW_DTYPE)
    for i in range(t["entry_count"]):
        d.title(f"footer entry row {i} (24 B)")
        d.struct(ENTRY_ROW_DTYPE)
    d.title(f"footer keys blob ({t['keys_length']} B)")
    d.field(t["keys_length"], "keys, concatenated in record order", text=True)
    d.title(f"footer metadata JSON ({t['metadata_length']} B, UTF-8)")
    d.field(t["metadata_length"], "metadata", text=True)
    if total - pad_at:
        d.title("footer padding")
        need(
            data[d.pos : d.pos + total - pad_at] == bytes(total - pad_at), "footer padding is zero"
        )
        d.field(total - pad_at, f"zero padding to a multiple of 8 (footer is {total} B)")
    check(
        "footer_crc", f"file bytes [{footer_offset}, {t_at})", t["footer_crc"], footer_offset, t_at
    )

    # trailer
    d.title(f"trailer [{t_at}, {len(data)})")
    tr = d.struct(TRAILER_DTYPE)
    check(
        "trailer_crc",
        f"file bytes [{t_at}, {t_at + 52}) = trailer bytes [0, 52)",
        tr["trailer_crc"],
        t_at,
        t_at + 52,
    )
    need(tr["header_crc"] == h["header_crc"], "the trailer names the header")
    need(d.pos == len(data), "the trailer ends the file")

    # the real reader agrees
    report = ShardReader(data, name="example.shard").verify()
    need(report.bytes == len(data), "verify() read the whole file")
    need(report.records == len(SAMPLES), "verify() found every record")

    size = footer_offset + total + TRAILER_SIZE
    need(size == len(data), "the trailer gives the file size")
    r, e, k, m = (t[n] for n in ("record_count", "entry_count", "keys_length", "metadata_length"))
    out = [
        f"File size: {len(data)} bytes; SHA-256 `{hashlib.sha256(data).hexdigest()}`.",
        "",
        f"How a reader opens it: the file is shorter than 64 KiB, so the tail read"
        f" returns all {len(data)} bytes. The trailer at {t_at} gives"
        f" `footer_offset = {footer_offset}`, `R = {r}`, `E = {e}`, `K = {k}` and"
        f" `M = {m}`. The footer size is therefore"
        f" `F = align_up(32·{r} + 24·{e} + {k} + {m}, 8) = {total}`, and"
        f" `{footer_offset} + {total} + 64 = {size}` equals the length of the tail read."
        f" The header is in the same buffer, and its CRC `{h['header_crc']:#010x}` equals"
        f" the trailer's copy.",
        "",
        "```text",
        "offset    bytes                                            field (+offset in structure) = value",
        *d.lines,
        "```",
        "",
        "Every CRC32C, recomputed by the generator over the stated range:",
        "",
        "| CRC | covers | value |",
        "| --- | --- | --- |",
        *(f"| {n} | {rng} | `{v:#010x}` |" for n, rng, v in crcs),
        "",
        "Key hashes (xxHash64, seed 0, of the UTF-8 key):",
        "",
        "| key | unsigned (`key_hash` field) | signed BIGINT (SQL) |",
        "| --- | --- | --- |",
        *(
            f"| `{k}` | `{key_hash(k.encode()):#018x}` = {key_hash(k.encode())} | {signed_key_hash(k.encode())} |"
            for k, _ in SAMPLES
        ),
    ]
    return "\n".join(out) + "\n"


TABLES = {
    "HEADER_DTYPE": HEADER_DTYPE,
    "RECORD_HEAD_DTYPE": RECORD_HEAD_DTYPE,
    "ENTRY_DESC_DTYPE": ENTRY_DESC_DTYPE,
    "RECORD_ROW_DTYPE": RECORD_ROW_DTYPE,
    "ENTRY_ROW_DTYPE": ENTRY_ROW_DTYPE,
    "TRAILER_DTYPE": TRAILER_DTYPE,
}


def table_problems(doc: str) -> list[str]:
    """Compare each offset table of FORMAT.md with the dtype named just above it."""
    problems = []
    for label, dtype in TABLES.items():
        at = doc.find(f"`{label}`")
        if at < 0:
            problems.append(f"{label}: not mentioned")
            continue
        rows = []
        for line in doc[at:].splitlines()[1:]:
            cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
            if rows and not line.startswith("|"):
                break
            if line.startswith("|") and cells[0].isdigit():
                rows.append(tuple(cells[:4]))
        expected = []
        for name in dtype.names:
            ftype, offset = dtype.fields[name][:2]
            if ftype.kind in "SV":
                kind = f"bytes[{ftype.itemsize}]"
            else:
                kind = f"{'i' if ftype.kind == 'i' else 'u'}{8 * ftype.itemsize}"
            expected.append((str(offset), str(ftype.itemsize), kind, name))
        if rows != expected:
            problems.append(f"{label}: FORMAT.md has {rows}, spec.py has {expected}")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--check", action="store_true", help="fail if docs/FORMAT.md does not hold this output"
    )
    p.add_argument("--update", action="store_true", help="replace the example in docs/FORMAT.md")
    p.add_argument("--out", type=Path, help="also write the example shard to this path")
    args = p.parse_args(argv)

    data = build()
    text = annotate(data)
    if args.out:
        args.out.write_bytes(data)
    if not (args.check or args.update):
        sys.stdout.write(text)
        return 0
    doc = DOC.read_text(encoding="utf-8")
    head, sep1, rest = doc.partition(BEGIN + "\n")
    _, sep2, tail = rest.partition(END)
    if not (sep1 and sep2):
        print(f"{DOC}: markers {BEGIN!r} / {END!r} not found", file=sys.stderr)
        return 2
    new = head + BEGIN + "\n" + text + END + tail
    if args.check:
        problems = table_problems(doc)
        for problem in problems:
            print(f"{DOC}: offset table differs: {problem}", file=sys.stderr)
        if problems:
            return 1
        if new != doc:
            print(
                f"{DOC}: the worked example is stale; run {Path(__file__).name} --update",
                file=sys.stderr,
            )
            return 1
        print("docs/FORMAT.md offset tables match spec.py; the worked example is up to date")
        return 0
    DOC.write_text(new, encoding="utf-8")
    print(f"updated {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
