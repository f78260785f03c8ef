"""One process of the thread, fork and close tests (test_threads.py), run as a script.

A crash (SIGSEGV) or a hang must not take pytest with it: the test runs this
file in a process of its own, bounded in time, and reads its exit code (a
negative one is death by a signal) and its last line, a JSON summary.

``close``: rounds of one ``Catalog`` used by threads that look up (``get``),
batch (``get_many``) and stream (``keys``), while short-lived threads come
and go (each one's lookup is evicted as it ends) and another thread opens and
closes files (so that a descriptor closed too early gets its number reused),
then ``close()`` from the main thread while they run. Every record returned
must hold the bytes written for its key; every failure after the close must
be ``CatalogClosedError``; none before it; and every API call after it raises
``CatalogClosedError``.

``fork``: threads look up, batch, stream and select (``where=``), while the
main thread forks children that look up through the same ``Catalog``
object; each child must finish (its lookups served, or a typed error)
within a timeout.

Usage: ``python threads_child.py '{"mode": "close", "url": ..., "rounds": 8, ...}'``
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: catalog.helpers

from catalog.helpers import sample
from shardcat.errors import CatalogClosedError, CatalogError
from shardcat.reading import Catalog

JOIN_TIMEOUT = 60.0


def expected(key: str) -> bytes:
    return sample(key)["jpg"]  # type: ignore[no-any-return]


class Tally:
    """What the threads saw, under a lock: calls, records checked, and anything wrong."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0
        self.records = 0
        self.after_close = 0  # CatalogClosedError after the close
        self.bad: list[str] = []

    def wrong(self, what: str) -> None:
        with self.lock:
            if len(self.bad) < 20:
                self.bad.append(what)


def run_thread(
    tally: Tally, closed: threading.Event, stop: threading.Event, call: Callable[[], int]
) -> None:
    """``call()`` (records it checked) until ``stop``; judges each failure by ``closed``."""
    while not stop.is_set():
        was_closed = closed.is_set()
        try:
            n = call()
        except CatalogClosedError:
            if not closed.is_set():
                tally.wrong("CatalogClosedError before close() was called")
            with tally.lock:
                tally.after_close += 1
            time.sleep(0.001)
            continue
        except Exception as e:  # anything else is a bug, before the close or after it
            tally.wrong(f"{type(e).__name__}: {e} (closed: {was_closed}, {closed.is_set()})")
            time.sleep(0.001)
            continue
        with tally.lock:
            tally.calls += 1
            tally.records += n


def one_close_round(cfg: dict[str, Any], keys: list[str], rng: random.Random, tally: Tally) -> None:
    cat = Catalog(cfg["url"], storage_options=cfg.get("storage_options"), max_open_shards=2)
    closed, stop = threading.Event(), threading.Event()

    def get() -> int:
        key = rng.choice(keys)
        rec = cat.get("train", key)
        if rec.key != key or bytes(rec["jpg"].data) != expected(key):
            tally.wrong(f"get({key!r}) returned other bytes")
        return 1

    def get_many() -> int:
        chosen = rng.sample(keys, 25)
        result = cat.get_many("train", chosen)
        for key, rec in zip(chosen, result):
            if rec is None or rec.key != key or bytes(rec["jpg"].data) != expected(key):
                tally.wrong(f"get_many: {key!r} missing or other bytes")
        return len(chosen)

    def stream() -> int:
        got = list(cat.keys("train", limit=50))
        if got != sorted(keys)[:50]:
            tally.wrong("keys() streamed other keys")
        return len(got)

    def short_lived() -> int:
        # A thread that looks up once and ends: its lookup is evicted as it goes.
        errors: list[BaseException] = []

        def once() -> None:
            try:
                get()
            except BaseException as e:
                errors.append(e)

        t = threading.Thread(target=once)
        t.start()
        t.join(JOIN_TIMEOUT)
        if errors:
            raise errors[0]
        return 1

    def reuse_numbers() -> int:
        # Opens and closes files: a descriptor closed under a read is soon another file's.
        fds = [os.open(cfg["decoy"], os.O_RDONLY) for _ in range(4)]
        for fd in fds:
            os.close(fd)
        return 0

    calls = [get, get, get_many, stream, short_lived, reuse_numbers]
    threads = [
        threading.Thread(target=run_thread, args=(tally, closed, stop, c), daemon=True)
        for c in calls
    ]
    for t in threads:
        t.start()
    time.sleep(rng.uniform(0.02, 0.15))
    closed.set()  # from here on, CatalogClosedError is the answer
    cat.close()
    time.sleep(0.05)  # the threads meet the closed catalog
    stop.set()
    for t in threads:
        t.join(JOIN_TIMEOUT)
        if t.is_alive():
            tally.wrong("a thread did not finish within the timeout")
    for name, call in [
        ("get", lambda: cat.get("train", keys[0])),
        ("get_many", lambda: cat.get_many("train", keys[:3])),
        ("locate", lambda: cat.locate("train", keys[0])),
        ("keys", lambda: cat.keys("train")),
        ("count", lambda: cat.count("train")),
        ("dataset", lambda: cat.dataset("train")),
        ("log", lambda: cat.log("train")),
    ]:
        try:
            call()
            tally.wrong(f"{name}() after close() did not raise")
        except CatalogClosedError:
            pass
        except Exception as e:
            tally.wrong(f"{name}() after close() raised {type(e).__name__}: {e}")
    cat.close()  # idempotent


def close_mode(cfg: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    rng = random.Random(cfg.get("seed", 0))
    tally = Tally()
    for _ in range(cfg["rounds"]):
        one_close_round(cfg, keys, rng, tally)
    return {
        "calls": tally.calls,
        "records": tally.records,
        "closed_errors": tally.after_close,
        "bad": tally.bad,
    }


def fork_mode(cfg: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    rng = random.Random(cfg.get("seed", 0))
    cat = Catalog(cfg["url"], storage_options=cfg.get("storage_options"))
    tally = Tally()
    closed, stop = threading.Event(), threading.Event()

    def get() -> int:
        cat.get("train", rng.choice(keys))
        return 1

    def get_many() -> int:
        return len(cat.get_many("train", rng.sample(keys, 20)))

    def stream() -> int:
        return len(list(cat.keys("train", limit=50)))

    def select() -> int:
        return cat.select("train", "key <> ''").count

    threads = [
        threading.Thread(target=run_thread, args=(tally, closed, stop, c), daemon=True)
        for c in (get, get, get_many, stream, select)
    ]
    for t in threads:
        t.start()
    outcomes = {"served": 0, "typed": 0, "other": 0, "hung": 0, "signal": 0}
    for c in range(cfg["children"]):
        time.sleep(rng.uniform(0.0, 0.03))
        pid = os.fork()
        if pid == 0:  # the child: the same Catalog, its threads gone
            code = 0
            try:
                for key in keys[c % 7 :: 9][:10]:
                    rec = cat.get("train", key)
                    if bytes(rec["jpg"].data) != expected(key):
                        code = 5
                result = cat.get_many("train", keys[:30])
                if any(r is None or bytes(r["jpg"].data) != expected(r.key) for r in result):
                    code = 5
                list(cat.keys("train", limit=10))
            except CatalogError:
                code = 3  # typed: allowed
            except BaseException:
                code = 4
            os._exit(code)
        deadline = time.monotonic() + cfg["child_timeout"]
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
                key = {0: "served", 3: "typed"}.get(code, "signal" if code < 0 else "other")
                outcomes[key] += 1
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                outcomes["hung"] += 1
                break
            time.sleep(0.005)
    stop.set()
    for t in threads:
        t.join(JOIN_TIMEOUT)
    cat.close()
    return {**outcomes, "calls": tally.calls, "bad": tally.bad}


def main() -> None:
    cfg = json.loads(sys.argv[1])
    with Catalog(cfg["url"], storage_options=cfg.get("storage_options")) as cat:
        keys = list(cat.keys("train"))
    with tempfile.NamedTemporaryFile() as decoy:
        cfg["decoy"] = decoy.name
        summary = close_mode(cfg, keys) if cfg["mode"] == "close" else fork_mode(cfg, keys)
    print(json.dumps(summary), flush=True)
    os._exit(0)  # daemon threads of a failed round may still run


if __name__ == "__main__":
    main()
