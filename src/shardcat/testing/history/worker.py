"""One process of a concurrent history: run its planned operations, log each one.

Each operation is logged twice to the process's JSON-lines file, flushed at
once: when it is invoked (kind, arguments, monotonic time) and when it
completes (time, result or typed error). A process killed mid-operation
leaves its invocation without a completion: an operation whose outcome is
unknown, as Jepsen calls it *indeterminate*.

Reads report every sample whole: its base entry ``txt`` and, when it has
one, the column group's entry ``cap`` (:func:`~.ops.sample_value`), from
lookups and from the streaming reader alike.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import traceback
from pathlib import Path
from typing import Any

from ...errors import KeyNotFoundError, ShardcatError
from .ops import (
    GROUP,
    GROUP_ENTRY,
    WRITES,
    HistoryConfig,
    Op,
    OpSpec,
    op_id,
    op_message,
    plan_ops,
    sample_value,
    value_of,
)

__all__ = [
    "GC_GRACE",
    "INJECTED",
    "Journal",
    "read_log",
    "read_pairs",
    "read_state",
    "release_catalogs",
    "run_process",
    "version_spec",
]

GC_GRACE = dt.timedelta(hours=1)
"""gc's grace for unregistered files: longer than any history, so it never takes a file a
running job is writing (that is what the grace is for); it removes files of deleted shards."""
BARRIER_TIMEOUT = 300.0
INJECTED = 500
"""Operations a planted bug or forced schedule runs are numbered from here in their process."""


def run_process(config: HistoryConfig, process: int, log_path: str, go: Any) -> None:
    """Run one process's operations (spawned by :func:`~.runner.run_history`)."""
    from ...reading import Catalog
    from . import bugs

    specs = plan_ops(config, process)
    warm_up()
    client = _client(config.scheduler)
    with (
        Catalog(config.catalog_url, storage_options=config.storage_options) as cat,
        open(log_path, "a", encoding="utf-8") as log,
    ):
        journal = Journal(log, process, cat, client, config)
        bugs.apply(config.plant, journal)
        go.wait(BARRIER_TIMEOUT)
        deadline = time.monotonic() + config.seconds
        for spec in specs:
            if time.monotonic() > deadline:
                break
            args = dict(spec.args)
            _draw(cat, config, spec, args)
            journal.record(spec.id, spec.kind, args)
    if client is not None:
        client.close()


def warm_up() -> None:
    """Import what the operations use before the start, so imports do not stretch their windows.

    ``shardcat.write`` asks whether its input is a Dask dataframe, which imports
    dask.dataframe: seconds on a loaded machine, once per process. Also run on
    the cluster's workers (their tasks import the orchestration modules).
    """
    import dask.bag
    import dask.dataframe  # noqa: F401

    import shardcat.orchestration.compact
    import shardcat.orchestration.copy
    import shardcat.orchestration.gc
    import shardcat.orchestration.read
    import shardcat.orchestration.write  # noqa: F401


def release_catalogs(url: str) -> int:
    """Close a Dask worker's catalogs on ``url`` (run there after a history); how many.

    A worker keeps one open Catalog per catalog it served (``tasks.catalog_for``):
    every history has a catalog of its own (a PostgreSQL schema), so without this
    a long run would hold the connections of every history it ran.
    """
    from ...orchestration import tasks

    with tasks._lock:
        cats = [tasks._catalogs.pop(h) for h in list(tasks._catalogs) if h.url == url]
    for cat in cats:
        cat.close()
    return len(cats)


def _client(address: str | None) -> Any:
    if address is None:
        return None
    from distributed import Client

    return Client(address, timeout=60, set_as_default=False)


class Journal:
    """Runs operations of one process and logs each one's invocation and completion.

    A planted bug or a forced schedule (:mod:`.bugs`) may run operations of
    its own through :meth:`record`; they get ids of their own
    (:data:`INJECTED` above the process's) and are checked like the others.
    """

    def __init__(
        self, log: Any, process: int, cat: Any, client: Any, config: HistoryConfig
    ) -> None:
        self.log, self.process, self.cat, self.client, self.config = (
            log,
            process,
            cat,
            client,
            config,
        )
        self._injected = 0

    def next_injected_id(self) -> int:
        self._injected += 1
        return op_id(self.process, INJECTED + self._injected - 1)

    def record(self, op_number: int, kind: str, args: dict[str, Any]) -> Op:
        """Run one operation, logged; its error (if any) is recorded, not raised."""
        op = Op(op_number, self.process, kind, args, t0=time.monotonic())
        self._write({"event": "invoke", **op.to_json()})
        try:
            op.result = _execute(self.cat, self.client, self.config, op)
            op.ok = True
        except Exception as e:
            op.ok = False
            message = str(e)[:600]
            if not isinstance(e, ShardcatError):  # untyped: where it came from, for the report
                message += " | " + " < ".join(
                    f"{f.name}:{f.lineno}" for f in traceback.extract_tb(e.__traceback__)[-4:]
                )
            op.error = ([c.__name__ for c in type(e).__mro__], message)
        op.t1 = time.monotonic()
        self._write({"event": "complete", **op.to_json()})
        return op

    def _write(self, record: dict[str, Any]) -> None:
        self.log.write(json.dumps(record) + "\n")
        self.log.flush()
        os.fsync(self.log.fileno())


def _draw(cat: Any, config: HistoryConfig, spec: OpSpec, args: dict[str, Any]) -> None:
    """Run-time choices, made before the invocation: a version to read or tag, the root."""
    if "back" in args:
        current = cat.info(config.dataset).version
        args["version"] = max(1, current - args.pop("back"))
    if spec.kind in WRITES:
        args["root"] = cat.info(config.dataset).root_url  # a move may have changed it
    if spec.kind == "copy":
        args["target"] = f"{config.dataset}-c{spec.id}"
        args["dest"] = f"{config.base.rstrip('/')}/copies/{spec.id}"
    if spec.kind == "move":
        args["dest"] = f"{config.base.rstrip('/')}/moves/{spec.id}"


def version_spec(args: dict[str, Any]) -> int | str | None:
    """The ``version=`` a read asks for: None (latest), a number or a tag."""
    at = args.get("at", "latest")
    if at == "version":
        return int(args["version"])
    if at == "tag":
        return str(args["tag"])
    return None


def _execute(cat: Any, client: Any, config: HistoryConfig, op: Op) -> Any:
    import shardcat
    from shardcat.orchestration.gc import gc

    ds, a = config.dataset, op.args
    if op.kind in WRITES:
        mode: Any = {"overwrite": "overwrite", "create": "create"}.get(op.kind, "append")
        on_duplicate: Any = {"replace": "replace", "skip": "skip"}.get(op.kind, "error")
        written = shardcat.write(
            [{"__key__": k, "txt": value_of(op.id, k)} for k in a["keys"]],
            a["root"],
            catalog=cat,
            dataset=ds,
            mode=mode,
            on_duplicate=on_duplicate,
            message=op_message(op.id),
            max_records_per_shard=config.shard_records,
            storage_options=config.storage_options,
            client=client,
            progress=False,
        )
        return {"job": written.job_id, "version": cat.job(written.job_id).version}
    if op.kind == "add_entries":
        added = shardcat.add_entries(
            [{"__key__": k, GROUP_ENTRY: value_of(op.id, k)} for k in a["keys"]],
            catalog=cat,
            dataset=ds,
            group=GROUP,
            mode=a["mode"],
            on_missing=a["on_missing"],
            replace_entries=bool(a.get("replace_entries", False)),
            message=op_message(op.id),
            max_records_per_shard=config.shard_records,
            storage_options=config.storage_options,
            client=client,
            progress=False,
        )
        return {
            "job": added.job_id,
            "version": cat.job(added.job_id).version,
            "skipped": added.skipped_keys,
        }
    if op.kind == "drop_group":
        return {"version": cat.drop_group(ds, GROUP, message=op_message(op.id))}
    if op.kind == "delete":
        version = cat.delete_keys(
            ds, a["keys"], missing_ok=a["missing_ok"], message=op_message(op.id)
        )
        return {"version": version}
    if op.kind in ("compact", "fold"):
        done = shardcat.compact(
            cat,
            ds,
            min_live=a["min_live"],
            client=client,
            message=op_message(op.id),
            fold_groups=op.kind == "fold",
        )
        return {
            "version": done.version,
            "job": done.job_id,
            "records": done.records,
            "folded": done.folded,
        }
    if op.kind == "expire":
        result = cat.expire(ds, keep_last=a["keep_last"])
        return {"expired": result.expired, "retired": len(result.retired_shards)}
    if op.kind == "gc":
        report = gc(cat, ds, grace=GC_GRACE)
        return {"deleted": len(report.deleted_shards), "errors": report.errors[:5]}
    if op.kind in ("copy", "move"):
        move = op.kind == "move"
        summary = shardcat.copy_dataset(
            cat,
            ds,
            a["dest"],
            name=None if move else a["target"],
            move=move,
            client=client,
            storage_options=config.storage_options,
        )
        return {"job": summary.job_id, "records": summary.records}
    if op.kind == "tag":
        return {"version": cat.tag(ds, a["version"], a["name"], move=True)}
    if op.kind == "untag":
        return {"version": cat.untag(ds, a["name"])}
    return _read(cat, config, op)


def _read(cat: Any, config: HistoryConfig, op: Op) -> Any:
    ds, version = config.dataset, version_spec(op.args)
    if op.kind == "get":
        try:
            record = cat.get(ds, op.args["key"], version=version)
        except KeyNotFoundError:
            return {"value": None}
        return {"value": _sample(record)}
    if op.kind == "get_many":
        return {"state": read_state(cat, ds, config.keys, version)}
    if op.kind == "keys":
        return {"keys": list(cat.keys(ds))}
    if op.kind == "count":
        return {"count": cat.count(ds)}
    if op.kind == "read":
        return {"pairs": read_pairs(cat, ds, version)}
    raise ValueError(f"unknown operation kind {op.kind!r}")


def read_state(cat: Any, ds: str, keys: list[str], version: int | str | None) -> dict[str, str]:
    """``get_many`` of ``keys`` at ``version``: the value of each key found (:func:`sample_value`)."""
    batch = cat.get_many(ds, keys, version=version)
    return {k: _sample(r) for k, r in batch.found().items()}


def read_pairs(cat: Any, ds: str, version: int | str | None) -> list[list[str]]:
    """``shardcat.read`` at ``version``: its (key, value) pairs in the order it streams them."""
    import shardcat

    samples = shardcat.read(cat, ds, version=version).compute(scheduler="sync")
    return [[s["__key__"], _sample(s)] for s in samples]


def _sample(record: Any) -> str:
    """A sample (a lookup's record or a streamed sample) as :func:`sample_value` reports it."""
    cap = record.get(GROUP_ENTRY)
    return sample_value(_text(record["txt"]), None if cap is None else _text(cap))


def _text(value: Any) -> str:
    """An entry as text: a lookup's ``Entry`` (``decode``), streamed bytes, or a decoded value."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode()
    return str(value.decode()) if hasattr(value, "decode") else str(value)


def read_log(path: Path) -> list[Op]:
    """The operations of one process's log: completions, and invocations never completed."""
    ops: dict[int, Op] = {}
    if not path.exists():
        return []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a kill
            continue
        record.pop("event", None)
        op = Op.from_json(record)
        if op.id not in ops or op.done:
            ops[op.id] = op
    return list(ops.values())
