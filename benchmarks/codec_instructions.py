"""Instructions per call of the compiled record codec's entry points (callgrind), without the machine's load.

For each mode, a child interpreter runs the operation N times and another
3N times under ``valgrind --tool=callgrind``; the difference, halved, is N
operations without imports and set-up, divided by N: the cost of one. The
data (2-8 KiB records of one entry, as ``bench_format.py`` writes) is made in
the child, identically in both runs, so it cancels out too.

* ``batch``: ``_ccodec.decode_batch`` of a 10,000-record batch in 8 blobs, then
  ``len(rec["bin"])`` of each record (a ``get_many`` without its reads);
  per record;
* ``indexed``: ``decode_indexed`` of one record (``ShardReader.read``), per call;
* ``spanned``: ``decode_spanned`` of one record (the point lookup), per call;
* ``stream``: ``iter_records`` over a buffer of 10,000 records, with
  ``len(rec["bin"])`` and ``rec["bin"].view`` of each; per record;
* ``spans``: ``crc32c_spans`` of 10,000 spans of a buffer, per span;
* ``gather``: ``gather_copy`` of 10,000 runs of one piece each, per run.

    .venv/bin/python benchmarks/codec_instructions.py [--modes batch,indexed,...] [--n 3]

Needs valgrind on the PATH. Nothing here asserts: it prints the counts.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

MODES = ("batch", "indexed", "spanned", "stream", "spans", "gather")
PER = {
    "batch": 10_000,
    "indexed": 1,
    "spanned": 1,
    "stream": 10_000,
    "spans": 10_000,
    "gather": 10_000,
}
"""Operations one repetition stands for (the divisor)."""


def _records(count: int) -> tuple[list[bytes], list[bytes], list[str]]:
    import numpy as np
    import xxhash

    from shardcat.format import records
    from shardcat.format.checksums import crc32c
    from shardcat.format.records import PreparedEntry
    from shardcat.format.spec import Codec

    rng = np.random.default_rng(0)
    blob = rng.integers(0, 256, size=1 << 20, dtype=np.uint8).tobytes()
    datas, spans, keys = [], [], []
    for i in range(count):
        n = int(rng.integers(2048, 8193))
        at = int(rng.integers(0, len(blob) - n))
        payload = blob[at : at + n]
        key = f"sample/{i:08d}"
        entry = PreparedEntry(
            b"bin", b"application/octet-stream", Codec.NONE, payload, crc32c(payload)
        )
        enc = records.encode_record(key.encode(), xxhash.xxh64_intdigest(key.encode()), [entry], 64)
        datas.append(b"".join(bytes(p) for p in enc.parts))
        spans.append(
            (enc.offsets[0]).to_bytes(4, "little")
            + n.to_bytes(4, "little")
            + entry.crc.to_bytes(4, "little")
        )
        keys.append(key)
    return datas, spans, keys


def _child(mode: str, reps: int) -> None:
    import numpy as np

    import shardcat.format  # noqa: F401  (sets the codec up)
    from shardcat.format import _ccodec as c
    from shardcat.format.spans import unpack_spans
    from shardcat.format.spec import BATCH_ROW_DTYPE

    count = 10_000 if mode in ("batch", "stream", "spans", "gather") else 1
    datas, spans, keys = _records(count)
    if mode == "batch":
        per_blob = (count + 7) // 8
        blobs, rows = [], []
        for g in range(0, count, per_blob):
            chunk = datas[g : g + per_blob]
            at = 0
            for k, d in enumerate(chunk):
                rows.append((len(blobs), 0, g + k, 0, at, len(d), 4096 + 64 * (g + k)))
                at += len(d)
            blobs.append(memoryview(b"".join(chunk)))
        table = np.array(rows, dtype=BATCH_ROW_DTYPE)
        for _ in range(reps):
            out, rejected = c.decode_batch(blobs, table, keys, spans, ["file:///a"], [64], {})
            assert not rejected
            n = 0
            for rec in out:
                n += len(rec["bin"])
    elif mode == "indexed":
        view, cache = memoryview(datas[0]), {}
        for _ in range(reps):
            c.decode_indexed(
                view,
                key=keys[0],
                length=len(datas[0]),
                path="p",
                offset=64,
                alignment=64,
                text_cache=cache,
            )
    elif mode == "spanned":
        data, cache = datas[0], {}
        for _ in range(reps):
            c.decode_spanned(data, keys[0], len(data), "p", 64, 64, spans[0], unpack_spans, cache)
    elif mode == "stream":
        buf = memoryview(b"".join(datas))
        for _ in range(reps):
            n = 0
            for rec in c.iter_records(buf, 0, len(buf), 0, -1, 64, 0, None, {}, False, "p"):
                e = rec["bin"]
                n += len(e) + e.view.nbytes
    elif mode == "spans":
        buf = b"".join(datas)
        lengths = np.array([len(d) for d in datas], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        for _ in range(reps):
            c.crc32c_spans(buf, starts, lengths)
    elif mode == "gather":
        sources = [b"".join(datas[: count // 2]), b"".join(datas[count // 2 :])]
        lengths = np.array([len(d) for d in datas], dtype=np.int64)
        which = np.array([0] * (count // 2) + [1] * (count - count // 2), dtype=np.int64)
        offsets = np.concatenate(
            [
                np.cumsum(lengths[: count // 2]) - lengths[: count // 2],
                np.cumsum(lengths[count // 2 :]) - lengths[count // 2 :],
            ]
        ).astype(np.int64)
        counts = np.ones(count, dtype=np.int64)
        positions = (np.cumsum(lengths) - lengths).astype(np.int64)
        dest = np.zeros(int(lengths.sum()), dtype=np.uint8)
        for _ in range(reps):
            c.gather_copy(sources, which, offsets, counts, dest, positions, lengths)


def _instructions(mode: str, reps: int) -> int:
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        mode,
        "--reps",
        str(reps),
    ]
    env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stderr
    match = re.search(r"Collected : (\d+)", out)
    if match is None:
        raise RuntimeError(f"no callgrind total in:\n{out}")
    return int(match.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument(
        "--n", type=int, default=3, help="repetitions of the short run (the long one: 3n)"
    )
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--reps", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.reps)
        return
    for mode in args.modes.split(","):
        n = args.n * (1000 if PER[mode] == 1 else 1)
        one, three = _instructions(mode, n), _instructions(mode, 3 * n)
        per = (three - one) / (2 * n * PER[mode])
        print(
            f"{mode}: {per:,.0f} instructions per {'call' if PER[mode] == 1 else 'item'}",
            flush=True,
        )


if __name__ == "__main__":
    main()
