"""Run one document's command blocks in order, in the current folder, as a reader would.

Usage: ``python run_blocks.py BLOCKS.json`` where the file holds
``{"blocks": [...], "scheduler": null}``, each block
``{"where": "README.md:30", "line": 30, "kind": "python"|"shell", "text": ...}``.

Python blocks share one namespace (a later block uses what an earlier one
defined, as in a notebook); shell blocks run in ``bash -euo pipefail`` with
this interpreter's ``bin`` folder first on ``PATH``. The first failing block
stops the run: its location and the error go to stderr, and the exit code is 1.

One Dask cluster per document: before the first Python block that uses Dask,
a small ``LocalCluster`` (2 worker processes) is started in this folder and
becomes the current client, which ``shardcat.write``/``shardcat.read`` use
instead of starting a cluster each. The cluster is closed at the end. When
the spec names a ``scheduler`` (a running one, see ``stand_ins.py``), the
client connects to it instead.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

BLOCK_TIMEOUT = 300  # seconds, per shell block
_DASK_WORDS = ("shardcat.write(", "shardcat.read(", "import dask", "from dask", "distributed")


def _start_cluster(scheduler: str | None) -> Any:
    from distributed import Client, LocalCluster

    logging.getLogger("distributed").setLevel(logging.WARNING)
    if scheduler:
        return Client(scheduler), None
    cluster = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0"
    )
    return Client(cluster), cluster


def _run_shell(text: str) -> None:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", text],
        env=env,
        timeout=BLOCK_TIMEOUT,
        stdout=sys.stdout,
        stderr=sys.stderr,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"the shell block exited with status {result.returncode}")


def main(path: str) -> int:
    spec = json.loads(Path(path).read_text(encoding="utf-8"))
    blocks, scheduler = spec["blocks"], spec.get("scheduler")
    namespace: dict[str, Any] = {"__name__": "__main__"}
    dask: tuple[Any, Any] | None = None
    try:
        for block in blocks:
            t0 = time.perf_counter()
            print(f"=== {block['where']} ({block['kind']})", flush=True)
            try:
                if block["kind"] == "python":
                    if dask is None and any(w in block["text"] for w in _DASK_WORDS):
                        dask = _start_cluster(scheduler)
                    # Blank lines first, so that tracebacks give the document's line numbers.
                    source = "\n" * block["line"] + block["text"]
                    exec(compile(source, block["where"].split(":")[0], "exec"), namespace)
                else:
                    _run_shell(block["text"])
            except BaseException:
                sys.stdout.flush()
                print(f"FAILED: the {block['kind']} block at {block['where']}", file=sys.stderr)
                traceback.print_exc()
                return 1
            sys.stdout.flush()
            print(f"=== ok in {time.perf_counter() - t0:.2f} s", flush=True)
    finally:
        if dask is not None:
            client, cluster = dask
            client.close()
            if cluster is not None:
                cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
