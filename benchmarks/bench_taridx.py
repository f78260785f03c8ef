"""TARIDX export and import (docs/IN-PLACE.md), against listing the same tars with Python's tarfile.

Builds ``--tars`` tars of ``--samples`` samples each (a .jpg-sized and a .json
member per sample), in two layouts: plain ustar members, and webdataset-style
members with a pax header before each (whose export must read the tars'
headers). Indexes them with ``index_tar`` on an in-process Dask cluster, then
times, in one run:

- baseline: ``tarfile`` listing every member of every tar (what any tool that
  reads headers does);
- ``taridx export`` from the catalog;
- ``taridx import`` of that file into a new dataset (the Dask job included).

Prints seconds and each ratio to the baseline.

    python benchmarks/bench_taridx.py [--tars 8] [--samples 2000]
"""

from __future__ import annotations

import argparse
import io
import tarfile
import tempfile
import time
from pathlib import Path

from distributed import Client, LocalCluster

import shardcat
from shardcat.orchestration.taridx_io import export_taridx, import_taridx


def make_tars(folder: Path, tars: int, samples: int, pax: bool) -> list[str]:
    folder.mkdir(parents=True)
    fmt = tarfile.PAX_FORMAT if pax else tarfile.USTAR_FORMAT
    urls = []
    for t in range(tars):
        path = folder / f"part-{t:06d}.tar"
        with tarfile.open(path, "w", format=fmt) as tar:
            for s in range(samples):
                for ext, size in (("jpg", 3000), ("json", 40)):
                    info = tarfile.TarInfo(f"img/{t:03d}{s:06d}.{ext}")
                    info.size = size
                    if pax:
                        info.pax_headers = {"comment": "webdataset"}
                    tar.addfile(info, io.BytesIO(b"x" * size))
        urls.append(str(path))
    return urls


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tars", type=int, default=8)
    parser.add_argument("--samples", type=int, default=2000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp())
    catalog = f"sqlite:///{root}/c.db"
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        for pax in (False, True):
            name = "pax" if pax else "ustar"
            urls = make_tars(root / name, args.tars, args.samples, pax)
            shardcat.index_tar(urls, catalog=catalog, dataset=name, client=client)

            def listing(urls: list[str] = urls) -> None:
                for url in urls:
                    with tarfile.open(url) as tar:
                        tar.getmembers()

            base = timed(listing)
            out = str(root / f"{name}.taridx")
            export = timed(lambda out=out, name=name: export_taridx(catalog, name, out))
            imported = timed(
                lambda out=out, urls=urls, name=name: import_taridx(
                    catalog, out, urls, dataset=f"{name}-again", client=client
                )
            )
            print(
                f"{name}: {args.tars} tars x {args.samples} samples; tarfile listing {base:.2f} s; "
                f"export {export:.2f} s ({export / base:.2f} x); "
                f"import {imported:.2f} s ({imported / base:.2f} x)"
            )


if __name__ == "__main__":
    main()
