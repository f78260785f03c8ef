"""MosaicML Streaming's side of ``bench_readers.py --mds-python``: run by another venv's python.

``mosaicml-streaming`` cannot live in the project's venv (it pins numpy<2.2
and xxhash<4, and its package ``__init__`` imports torchvision, whose PyPI
wheel does not load with the project's CPU torch). ``MDSWriter`` and
``StreamingDataset`` themselves never touch torchvision: they are imported
from ``streaming.base`` with the package's ``__init__`` left out.

    /tmp/mdsvenv/bin/python benchmarks/mds_readers.py SAMPLES.pkl ROOT --repeat 3

reads the ``(key, jpg bytes, label)`` samples ``bench_readers.py`` pickled,
writes them with ``MDSWriter`` (``--write-only``: and stops, for
``bench_index_mds.py``) and prints one JSON line: samples/s through a
``DataLoader`` (list-collate, batches of 64) with 0, 1 and 2 workers, unshuffled
and shuffled, best of ``--repeat``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pickle
import sys
import time
import types
from typing import Any


def import_streaming() -> Any:
    spec = importlib.util.find_spec("streaming")
    if spec is None or spec.submodule_search_locations is None:
        raise SystemExit("mosaicml-streaming is not installed in this python")
    pkg = types.ModuleType("streaming")
    pkg.__path__ = list(spec.submodule_search_locations)
    sys.modules["streaming"] = pkg  # skip streaming/__init__.py (it imports torchvision)
    import streaming.base as base

    return base


def identity(batch: list[Any]) -> list[Any]:
    return batch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("samples")
    ap.add_argument("root")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--write-only", action="store_true", help="write ROOT/mds and stop (bench_index_mds.py)"
    )
    args = ap.parse_args()
    base = import_streaming()
    from torch.utils.data import DataLoader

    with open(args.samples, "rb") as f:
        samples = pickle.load(f)
    out = f"{args.root}/mds"
    columns = {"key": "str", "jpg": "bytes", "json": "json"}
    with base.MDSWriter(out=out, columns=columns, size_limit=1 << 26) as w:
        for key, jpg, label in samples:
            w.write({"key": key, "jpg": jpg, "json": {"label": label}})
    if args.write_only:
        print(json.dumps({"written": len(samples)}))
        return
    rates: dict[str, float] = {}
    for shuffle in (False, True):
        for workers in (0, 1, 2):
            best = float("inf")
            for _ in range(args.repeat):
                base.util.clean_stale_shared_memory()
                t0 = time.perf_counter()
                ds = base.StreamingDataset(local=out, shuffle=shuffle, batch_size=64)
                loader = DataLoader(ds, batch_size=64, num_workers=workers, collate_fn=identity)
                n = sum(len(b) for b in loader)
                best = min(best, time.perf_counter() - t0)
                if n != len(samples):
                    raise SystemExit(f"MDS yielded {n} samples of {len(samples)}")
                del loader, ds
            rates[f"{'shuffle' if shuffle else 'plain'} {workers}"] = len(samples) / best
    print(json.dumps(rates))


if __name__ == "__main__":
    main()
