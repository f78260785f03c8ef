"""The cold first lookup, run in a fresh interpreter by the runner.

Usage (by the runner only): ``python -m benchmarks.peers.cold SYSTEM.pickle KEY``.
Prints one JSON line: ``{"ms": ...}``, the time to import the system's library,
open the dataset and look one key up; the bytes are checked before printing.
"""

from __future__ import annotations

import json
import pickle
import sys
import time


def main() -> None:
    path, key = sys.argv[1], sys.argv[2]
    with open(path, "rb") as f:
        system = pickle.load(f)
    t = time.perf_counter()
    system.open()  # imports the library (adapters import lazily), opens the dataset
    payload, label = system.get(key)
    ms = (time.perf_counter() - t) * 1e3
    system.dataset.check(key, payload, label)
    system.close()
    print(json.dumps({"ms": ms}))


if __name__ == "__main__":
    main()
