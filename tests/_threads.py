"""Running a call that might hang, bounded: a test that waits on it fails instead of hanging."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["bounded"]


def bounded(call: Any, bound: float = 120.0) -> Any:
    """``call()`` on a thread: its result, or its error raised here; fails if it outlives
    ``bound`` seconds (a bound far above any deadline of the tests: it catches a call that
    never ends, it times nothing)."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = call()
        except BaseException as e:
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(bound)
    assert not t.is_alive(), f"the call never ended in {bound:.0f} s: nothing bounded it"
    if "error" in out:
        raise out["error"]
    return out["value"]
