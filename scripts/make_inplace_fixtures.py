"""Write the small real MDS and LitData directories ``tests/data/inplace/`` holds.

Run by a side venv's python that has ``mosaicml-streaming`` and ``litdata``
(neither can live in the project's venv; see benchmarks/mds_readers.py)::

    python3 -m venv /tmp/mdsvenv
    /tmp/mdsvenv/bin/pip install torch==2.13.0 mosaicml-streaming litdata
    /tmp/mdsvenv/bin/python scripts/make_inplace_fixtures.py tests/data/inplace

It writes, with the libraries' own writers:

- ``mds/``: an MDS directory of several column types in 3+ uncompressed shards;
- ``mds-gz/``: the same samples in gzip-compressed shards (indexing refuses them);
- ``litdata/``: a LitData optimized directory (``litdata.optimize``) in 3+ chunks;

and beside each, ``expected-*.json``: every sample as the library itself reads
it back (``StreamingDataset``, ``litdata.StreamingDataset``), made JSON-safe:
bytes as base64, images as their size, mode and pixels' SHA-256, arrays as
lists. The tests compare what shardcat reads with it sample by sample.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from mds_readers import import_streaming  # streaming.base without torchvision

N = 12


def image(i: int, fmt: str) -> Image.Image:
    img = Image.new("RGB", (6 + i, 5), color=(i * 19 % 256, i * 7 % 256, 120))
    if fmt == "PNG":
        return img
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=90)
    out.seek(0)
    return Image.open(out)  # a JpegImageFile: the writers store its bytes as they are


def jsonable(value: Any) -> Any:
    """A decoded value in a form JSON holds and the tests rebuild from shardcat's bytes."""
    if isinstance(value, Image.Image):
        return {
            "image": list(value.size),
            "mode": value.mode,
            "sha256": hashlib.sha256(value.convert("RGB").tobytes()).hexdigest(),
        }
    if hasattr(value, "numpy"):  # a torch tensor: LitData decodes an image to CHW uint8
        value = value.numpy()
        if value.ndim == 3 and value.dtype == np.uint8:
            return jsonable(Image.fromarray(value.transpose(1, 2, 0)))
    if isinstance(value, np.ndarray):
        return {"array": value.tolist(), "dtype": value.dtype.str}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes | memoryview):
        return {"base64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    return value


def mds_sample(i: int) -> dict[str, Any]:
    return {
        "id": f"sample-{i:03d}",
        "image": image(i, "JPEG"),
        "mask": image(i, "PNG"),
        "label": i % 4,
        "score": np.float32(i / 8),
        "small": np.uint8(200 + i),
        "meta": {"i": i, "tags": ["a", "b"][: i % 3]},
        "blob": bytes(range(i, i + 5 + i)),
        "caption": f"caption {i} \u00e9",
        "vec": np.arange(3, dtype=np.float32) + i,
    }


MDS_COLUMNS = {
    "id": "str",
    "image": "jpeg",
    "mask": "png",
    "label": "int",
    "score": "float32",
    "small": "uint8",
    "meta": "json",
    "blob": "bytes",
    "caption": "str",
    "vec": "ndarray:float32:3",
}


def write_mds(base: Any, out: Path, compression: str | None) -> None:
    with base.MDSWriter(
        out=str(out), columns=MDS_COLUMNS, size_limit=1 << 11, compression=compression
    ) as w:
        for i in range(N):
            w.write(mds_sample(i))


def read_mds(base: Any, root: Path) -> list[dict[str, Any]]:
    ds = base.StreamingDataset(local=str(root), shuffle=False, batch_size=1)
    return [{k: jsonable(v) for k, v in ds[i].items()} for i in range(len(ds))]


def litdata_sample(i: int) -> dict[str, Any]:
    return {
        "index": i,
        "image": image(i, "JPEG"),
        "label": i % 4,
        "score": i / 8,
        "text": f"text {i}",
        "blob": bytes(range(i, i + 3 + i)),
        "meta": {"a": i * 10, "b": f"b{i}"},
    }


def write_litdata(out: Path) -> None:
    import litdata

    litdata.optimize(
        fn=litdata_sample,
        inputs=list(range(N)),
        output_dir=str(out),
        chunk_size=5,
        num_workers=1,
        verbose=False,
        start_method="fork",
    )


def read_litdata(root: Path) -> list[dict[str, Any]]:
    import litdata

    ds = litdata.StreamingDataset(str(root))
    return [jsonable(ds[i]) for i in range(len(ds))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    out: Path = args.out
    base = import_streaming()
    for name in ("mds", "mds-gz", "litdata"):
        shutil.rmtree(out / name, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    write_mds(base, out / "mds", None)
    write_mds(base, out / "mds-gz", "gz")
    (out / "expected-mds.json").write_text(json.dumps(read_mds(base, out / "mds")))
    write_litdata(out / "litdata")
    expected = read_litdata(out / "litdata")
    (out / "expected-litdata.json").write_text(json.dumps(expected))
    print(json.dumps({"mds": N, "litdata": len(expected)}))


if __name__ == "__main__":
    main()
