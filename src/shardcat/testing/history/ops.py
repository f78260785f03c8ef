"""What a concurrent history is made of: its configuration, operations and their outcomes.

Every operation of a history has an id that is unique in the history and
names what it wrote: the value of key ``k`` written by operation 17 is
``"17:k"``, and every version a mutating operation commits carries the
message ``"op 17"``. A move's version carries the message the library gives
it (``"moved to DEST"``), and its destination holds its id. So the checker
maps every committed version back to the operation that made it.

Besides the base entry ``txt``, samples may have an entry ``cap`` of the
column group :data:`GROUP` (docs/GROUPS.md): ``add_entries`` (modes
``append`` and ``replace``, ``on_missing`` ``error`` or ``skip``) writes
``cap`` = ``value_of(op, k)`` for its keys, ``drop_group`` drops the group,
``fold`` (``compact(fold_groups=True)``) folds it into the base: the base
records then hold ``cap`` themselves, and ``add_entries`` of ``cap`` to
those keys is refused (``EntryExistsError``) unless it passes
``replace_entries=True`` (then the group's entry is read instead of the base's).
A read reports a sample as one string, :func:`sample_value`: ``txt``, then
``|`` and ``cap`` when the sample has one (``"17:k03|21:k03"``).

Plans are seeded: :func:`plan_ops` gives the same kinds, keys and arguments
for the same seed, process and count. What a plan cannot know in advance
(which version number to read: versions come and go) is chosen at run time
from what the plan drew (``back``: that many versions before the latest)
and logged with the operation.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "FILE_REMOVERS",
    "GROUP",
    "GROUP_ENTRY",
    "GROUP_KINDS",
    "READS",
    "WEIGHTS",
    "WRITES",
    "HistoryConfig",
    "Op",
    "OpSpec",
    "key_name",
    "op_message",
    "plan_ops",
    "sample_value",
    "value_of",
]

# Kinds of operation and how often each is drawn (relative weights).
WEIGHTS: dict[str, int] = {
    # mutations
    "append": 6,  # on_duplicate="error"
    "replace": 6,  # append with on_duplicate="replace"
    "skip": 2,  # append with on_duplicate="skip"
    "overwrite": 2,
    "create": 1,  # mode="create" on a dataset with records: DatasetExistsError
    "delete": 7,
    "compact": 6,
    "expire": 3,
    "gc": 2,
    "copy": 1,
    "move": 1,
    "tag": 2,
    "untag": 1,
    "add_entries": 5,  # group GROUP's entry "cap"; mode append/replace, on_missing error/skip
    "drop_group": 2,
    "fold": 3,  # compact(fold_groups=True): the group's entries into the base, the group dropped
    # reads
    "get": 6,
    "get_many": 6,
    "keys": 2,
    "count": 2,
    "read": 2,
}
WRITES = ("append", "replace", "skip", "overwrite", "create")
"""Kinds that run ``shardcat.write``."""
READS = frozenset({"get", "get_many", "keys", "count", "read"})
FILE_REMOVERS = frozenset({"gc", "move"})
"""Kinds that delete files: a read racing one may find a file gone (a typed error)."""
TAGS = ("t1", "t2", "t3")
GROUP = "g"
"""The column group ``add_entries`` writes (entry ``cap``) and ``drop_group`` drops."""
GROUP_ENTRY = "cap"
GROUP_KINDS = frozenset({"add_entries", "drop_group"})


@dataclass(frozen=True)
class HistoryConfig:
    """One history: where it runs, how big it is, and its seed.

    ``root`` is the dataset's folder URL (a local path or ``s3://...``);
    copies and moves go to fresh folders under ``base``.
    """

    catalog_url: str
    base: str
    seed: int
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    scheduler: str | None = None
    """A Dask scheduler's address (write, compact and copy need one)."""
    processes: int = 3
    ops_per_process: int = 20
    seconds: float = 60.0
    """Wall-clock cap: a process issues no new operation after this."""
    universe: int = 16
    """Keys ``k00`` ... : few, so that operations collide often."""
    shard_records: int = 4
    """Records per shard: small, so deletes leave mostly-dead shards to compact."""
    dataset: str = "h"
    plant: str | None = None
    """A planted bug (:mod:`shardcat.testing.history.bugs`) the processes apply, or None."""
    weights: dict[str, int] = field(default_factory=lambda: dict(WEIGHTS))

    @property
    def root(self) -> str:
        return f"{self.base.rstrip('/')}/{self.dataset}"

    @property
    def keys(self) -> list[str]:
        return [key_name(i) for i in range(self.universe)]

    def public(self) -> dict[str, Any]:
        """The configuration without storage options (they may hold credentials)."""
        out = asdict(self)
        out.pop("storage_options")
        return out


@dataclass(frozen=True)
class OpSpec:
    """One planned operation: its id, kind and arguments (run-time choices are drawn later)."""

    id: int
    process: int
    kind: str
    args: dict[str, Any]


@dataclass
class Op:
    """One operation as it happened: invoked at ``t0``, completed at ``t1`` (monotonic seconds).

    ``t1`` is None if its process died before it completed (its outcome is
    unknown: it may or may not have committed). ``error`` is the exception's
    class names, most derived first (its MRO), and its message.
    """

    id: int
    process: int
    kind: str
    args: dict[str, Any]
    t0: float
    t1: float | None = None
    ok: bool | None = None
    result: Any = None
    error: tuple[list[str], str] | None = None

    @property
    def done(self) -> bool:
        return self.t1 is not None

    @property
    def end(self) -> float:
        return float("inf") if self.t1 is None else self.t1

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Op:
        error = d.get("error")
        return cls(
            id=int(d["id"]),
            process=int(d["process"]),
            kind=str(d["kind"]),
            args=dict(d["args"]),
            t0=float(d["t0"]),
            t1=None if d.get("t1") is None else float(d["t1"]),
            ok=d.get("ok"),
            result=d.get("result"),
            error=None if error is None else (list(error[0]), str(error[1])),
        )


def key_name(i: int) -> str:
    return f"k{i:02d}"


def value_of(op: int, key: str) -> str:
    """The value operation ``op`` writes for ``key``: who wrote it is in the bytes."""
    return f"{op}:{key}"


def sample_value(base: str, cap: str | None) -> str:
    """How a read reports a sample: its base value, then ``|`` and its group entry if it has one."""
    return base if cap is None else f"{base}|{cap}"


def op_message(op: int) -> str:
    """The message of the version operation ``op`` commits."""
    return f"op {op}"


def op_id(process: int, n: int) -> int:
    """Unique in the history: process 1's ops are 1001, 1002, ...; 0 is the initial write."""
    return (process + 1) * 1000 + n + 1


def plan_ops(config: HistoryConfig, process: int) -> list[OpSpec]:
    """The seeded operations of one process (what only the run can choose is drawn then)."""
    rng = random.Random(f"{config.seed}/{process}")
    kinds = sorted(config.weights)
    weights = [config.weights[k] for k in kinds]
    keys = config.keys
    specs = []
    for n in range(config.ops_per_process):
        kind = rng.choices(kinds, weights)[0]
        args = _args(rng, kind, keys)
        if kind == "add_entries":
            # Drawn apart, so that adding it left every seed's plan as it was.
            args["replace_entries"] = random.Random(f"{config.seed}/{process}/{n}").random() < 0.3
        specs.append(OpSpec(op_id(process, n), process, kind, args))
    return specs


def _args(rng: random.Random, kind: str, keys: list[str]) -> dict[str, Any]:
    def some(lo: int, hi: int) -> list[str]:
        return sorted(rng.sample(keys, rng.randint(lo, min(hi, len(keys)))))

    if kind in ("append", "replace", "skip"):
        return {"keys": some(1, 6)}
    if kind in ("overwrite", "create"):
        return {"keys": some(1, 8)}
    if kind == "delete":
        return {"keys": some(1, 5), "missing_ok": rng.random() < 0.5}
    if kind == "add_entries":
        return {
            "keys": some(1, 6),
            "mode": rng.choice(["append", "append", "replace"]),
            # Half the universe is live at most times: "error" mostly fails (UnknownKeysError).
            "on_missing": rng.choice(["error", "skip", "skip"]),
        }
    if kind in ("compact", "fold"):
        return {"min_live": rng.choice([0.5, 0.75, 1.0])}
    if kind == "expire":
        return {"keep_last": rng.randint(1, 4)}
    if kind == "tag":
        return {"name": rng.choice(TAGS), "back": rng.randint(0, 3)}
    if kind == "untag":
        return {"name": rng.choice(TAGS)}
    if kind in ("get", "get_many", "read"):
        at = rng.choices(["latest", "version", "tag"], [5, 3, 2])[0]
        args: dict[str, Any] = {"at": at}
        if at == "version":
            args["back"] = rng.randint(0, 5)
        elif at == "tag":
            args["tag"] = rng.choice(TAGS)
        if kind == "get":
            args["key"] = rng.choice(keys)
        return args
    return {}
