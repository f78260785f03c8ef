"""What the catalog holds once every process of a history has stopped: the checker's final reads.

Plain data (JSON-able), so a history and its observation can be dumped,
loaded and checked again without the catalog.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import ShardcatError
from .ops import HistoryConfig, Op
from .worker import read_pairs, read_state

__all__ = ["observe"]


def observe(cat: Any, config: HistoryConfig, ops: list[Op], model_versions: int) -> dict[str, Any]:
    """Read everything the checker compares with its model, after the history.

    ``model_versions``: the highest version number to probe (versions the
    log no longer lists must answer VersionNotFoundError).
    """
    ds, keys = config.dataset, config.keys
    info = cat.info(ds)
    out: dict[str, Any] = {
        "latest": int(info.version),
        "root_url": info.root_url,
        "versions": [
            {
                "number": v.number,
                "operation": v.operation,
                "message": v.message,
                "job_id": v.job_id,
                "total_records": v.total_records,
                "tags": list(v.tags),
            }
            for v in cat.log(ds)
        ],
        "jobs": [
            {"id": j.id, "state": j.state, "version": j.version, "description": j.description}
            for j in cat.jobs(ds)
        ],
    }
    kept = [v["number"] for v in out["versions"]]
    # Every kept version, read two ways: batch lookups and the streaming reader.
    out["states"] = {str(n): _or_error(read_state, cat, ds, keys, n) for n in kept}
    out["streams"] = {str(n): _or_error(read_pairs, cat, ds, n) for n in kept}
    out["tags"] = {
        t: _or_error(read_state, cat, ds, keys, t) for v in out["versions"] for t in v["tags"]
    }
    out["latest_state"] = _or_error(read_state, cat, ds, keys, None)
    out["keys"] = _or_error(lambda: list(cat.keys(ds)))
    out["count"] = _or_error(cat.count, ds)
    # Versions no longer kept: a lookup there must be refused.
    out["gone"] = {
        str(n): _probe(cat, ds, keys[0], n)
        for n in range(1, max(model_versions, out["latest"]) + 1)
        if n not in kept
    }
    out["copies"] = {
        str(op.id): _copy(cat, op.args["target"], keys)
        for op in ops
        if op.kind == "copy" and "target" in op.args
    }
    out["history"] = _or_error(_history, cat, ds, info.root_url, keys)
    return out


def _history(cat: Any, ds: str, root: str, keys: list[str]) -> dict[str, Any]:
    """The dataset's history in its folder: what verify says of it, and a rebuild from it alone."""
    problems = [str(p) for p in cat.verify(ds).problems if p.kind.startswith("history")]
    twin = f"{ds}-rebuilt"
    cat.create_dataset(twin, root)
    rebuilt = cat.rebuild_history(twin, root, history_of=ds)
    states = {str(n): _or_error(read_state, cat, twin, keys, n) for n in rebuilt.versions}
    return {
        "problems": problems,
        "versions": rebuilt.versions,
        "tags": rebuilt.tags,
        "states": states,
    }


def _or_error(call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``, or the error it raised as ``{"error": [name, message]}``."""
    try:
        return call(*args)
    except Exception as e:
        return {"error": [type(e).__name__, str(e)[:300]]}


def _probe(cat: Any, ds: str, key: str, version: int) -> str:
    """How a lookup at an unkept version ended: the error's class name, or ``served``."""
    try:
        cat.get(ds, key, version=version)
    except ShardcatError as e:
        return type(e).__name__
    except Exception as e:
        return f"untyped {type(e).__name__}: {e}"
    return "served"


def _copy(cat: Any, name: str, keys: list[str]) -> dict[str, Any]:
    """A copy target: does it exist, its versions, its records and count."""
    try:
        versions = [
            {"number": v.number, "operation": v.operation, "total_records": v.total_records}
            for v in cat.log(name)
        ]
    except ShardcatError:  # DatasetNotFoundError: the copy never created it
        return {"exists": False}
    return {
        "exists": True,
        "versions": versions,
        "state": _or_error(read_state, cat, name, keys, None),
        "count": _or_error(cat.count, name),
    }
