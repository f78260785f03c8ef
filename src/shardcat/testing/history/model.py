"""The model of a history: which operation made each version, and what each version holds.

Built from the committed versions in version order: a write adds or
replaces its keys (``skip`` adds only keys not live), an overwrite replaces
everything, a delete removes its keys; compaction and move change no
visible data. The column group :data:`~.ops.GROUP` is modelled beside the
base, with docs/GROUPS.md's rules (those ``tests/catalog/test_group_model.py``
checks one operation at a time): ``add_entries`` gives keys with a live base
record the group's entry (``append``: keys new to the group; ``replace``:
the group must exist; a key without a base record is refused under
``on_missing="error"`` and left out under ``"skip"``), ``drop_group`` removes
the group; a base replace (``on_duplicate="replace"``) keeps the key's group
entry, a delete removes it, an overwrite keeps the entries of the keys the
new base has; a fold (``compact(fold_groups=True)``) moves each key's group
entry into its base record and drops the group (a base value then reads
``txt|cap`` by itself), and ``add_entries`` of keys whose base holds the entry
is refused (``EntryExistsError``) unless it passes ``replace_entries=True``:
then the group's entry is the one read (:func:`merged`). A fold that found no live group when it
began (its result's ``folded`` is empty) is a plain compaction, even if a
group was added before its commit. A version's state is the merged value of every key
(:func:`~.ops.sample_value`). Every version also gets the time window in which it was
committed (its operation's invocation and completion), so the checker can
say which versions a read may have seen (linearizability against the order
of commits), and the window in which it may have been expired.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .ops import GROUP_KINDS, WRITES, Op, sample_value

__all__ = [
    "INF",
    "REWRITES",
    "Anomaly",
    "Model",
    "base_has_entry",
    "build_model",
    "error_name",
    "merged",
    "writer_of",
]

INF = math.inf
REWRITES = ("compact", "fold")
"""Kinds that rewrite records: no visible change but a fold's (the group's entries into the base)."""


def base_has_entry(value: str) -> bool:
    """Whether a base value (the model's) holds the group's entry: a fold put it there."""
    return "|" in value


def merged(base: str, cap: str | None) -> str:
    """A sample's value from its base value and its group entry: the group's entry wins over
    one a fold put in the base (``replace_entries``), as a later group's wins (GROUPS.md)."""
    txt, _, folded = base.partition("|")
    return sample_value(txt, cap if cap is not None else (folded or None))


@dataclass(frozen=True)
class Anomaly:
    """One thing the history did that the model does not allow.

    ``ops`` are the operations involved (the first is the one that showed
    it), ``keys`` the keys concerned, ``version`` the version concerned.
    """

    kind: str
    detail: str
    ops: tuple[int, ...] = ()
    keys: tuple[str, ...] = ()
    version: int | None = None

    def __str__(self) -> str:
        where = f" at version {self.version}" if self.version is not None else ""
        who = f" (ops {', '.join(map(str, self.ops))})" if self.ops else ""
        return f"{self.kind}{where}{who}: {self.detail}"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "detail": self.detail,
            "ops": list(self.ops),
            "keys": list(self.keys),
            "version": self.version,
        }


@dataclass
class Model:
    """Versions 0 (before anything) to ``latest``: their operations, states and windows."""

    latest: int
    ops: dict[int, Op]
    made_by: dict[int, Op | None] = field(default_factory=dict)
    """Version -> the operation that committed it (None: not known)."""
    states: list[dict[str, str]] = field(default_factory=list)
    """Version -> key -> value as a read reports it (base and group entry merged)."""
    bases: list[dict[str, str]] = field(default_factory=list)
    """Version -> key -> base value."""
    groups: list[dict[str, str] | None] = field(default_factory=list)
    """Version -> key -> the group's entry (None: the group is not live at the version)."""
    expired_by: dict[int, list[Op]] = field(default_factory=dict)
    anomalies: list[Anomaly] = field(default_factory=list)

    # --- when was a version committed, and when may a read have seen it -------------

    def window(self, version: int) -> tuple[float, float]:
        """The interval in which ``version`` was committed (version 0: always there)."""
        if version == 0:
            return -INF, -INF
        op = self.made_by.get(version)
        if op is None:
            return -INF, INF
        return op.t0, op.end

    def latest_candidates(self, a: float, b: float) -> list[int]:
        """Versions that may have been the latest at some moment of ``[a, b]``."""
        out = []
        for v in range(self.latest + 1):
            if self.window(v)[0] > b:
                break  # committed after the interval, as is every later version
            if v == self.latest or self.window(v + 1)[1] >= a:
                out.append(v)
        return out

    def changed_during(self, a: float, b: float, own: int | None = None) -> list[int]:
        """Versions whose commit may have fallen inside ``[a, b]`` (other than ``own``)."""
        return [
            v
            for v in range(1, self.latest + 1)
            if v != own and self.window(v)[0] <= b and self.window(v)[1] >= a
        ]

    def may_exist(self, version: int, a: float, b: float) -> bool:
        """Whether ``version`` may have been kept at some moment of ``[a, b]``."""
        if not 1 <= version <= self.latest or self.window(version)[0] > b:
            return False
        return not any(e.end < a for e in self.expired_by.get(version, []))

    def may_be_absent(self, version: int, a: float, b: float) -> bool:
        """Whether ``version`` may have been not (or no longer) kept at some moment of ``[a, b]``."""
        if not 1 <= version <= self.latest or self.window(version)[1] > a:
            return True
        return any(e.t0 <= b for e in self.expired_by.get(version, []))

    def diff(self, version: int) -> set[str]:
        """The keys whose base record ``version`` changed."""
        return _changed(self.bases[version - 1], self.bases[version])

    def group_diff(self, version: int) -> set[str]:
        """The keys whose group record ``version`` changed (a drop: every key the group had)."""
        return _changed(self.groups[version - 1] or {}, self.groups[version] or {})

    def records(self, version: int) -> int:
        """Live records at ``version``: the base's and the group's (``total_records``)."""
        return len(self.bases[version]) + len(self.groups[version] or {})

    def touched(self, version: int) -> set[str]:
        """The keys whose records ``version`` added or removed: a replace or skip that began
        before it and commits one of them fails with KeyConflictError (docs/LIFECYCLE.md §3).

        Its changed keys; for a compaction every live key (it may have rewritten any); for a
        skip its keys (their records are added and removed at once, never visible).
        """
        op = self.made_by.get(version)
        keys = self.diff(version)
        if op is None or op.kind in REWRITES:
            keys |= self.states[version].keys()
        elif op.kind == "skip":
            keys |= set(op.args["keys"])
        return keys

    def group_touched(self, version: int) -> set[str]:
        """The keys whose group records ``version`` added or removed (skipped keys too: their
        records are added and removed at once)."""
        op = self.made_by.get(version)
        keys = self.group_diff(version)
        if op is not None and op.kind == "add_entries":
            keys |= set(op.args["keys"])
        return keys

    def who_last_changed(self, key: str, version: int) -> tuple[int, int | None] | None:
        """The latest version up to ``version`` that changed ``key``, and its operation's id."""
        for v in range(version, 0, -1):
            if self.states[v].get(key) != self.states[v - 1].get(key):
                op = self.made_by.get(v)
                return v, None if op is None else op.id
        return None

    def suspects(self, key: str, version: int) -> list[tuple[int, int]]:
        """Rewrites (compactions, moves) between ``key``'s last change and ``version``:
        (version, op id) of each, where a wrong value of the key may have come from."""
        last = self.who_last_changed(key, version)
        start = last[0] + 1 if last else 1
        return [
            (v, op.id)
            for v in range(start, version + 1)
            if (op := self.made_by.get(v)) is not None and op.kind in (*REWRITES, "move")
        ]


def _changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


def writer_of(value: str | None) -> int | None:
    """The id of the operation that wrote ``value`` (``"17:k03"`` -> 17)."""
    if not value or ":" not in value:
        return None
    head = value.split(":", 1)[0]
    return int(head) if head.isdigit() else None


def build_model(ops: Iterable[Op], observation: dict[str, Any]) -> Model:
    """Attribute every version 1..latest to an operation, then apply them in version order."""
    by_id = {op.id: op for op in ops}
    model = Model(latest=int(observation["latest"]), ops=by_id)
    add = model.anomalies.append
    claims: dict[int, list[Op]] = {}

    def claim(version: Any, op: Op, why: str) -> None:
        if not isinstance(version, int):
            return
        if not 1 <= version <= model.latest:
            add(Anomaly("version-out-of-range", f"{why} version {version}", (op.id,), (), version))
            return
        if op not in claims.setdefault(version, []):
            claims[version].append(op)

    # 1. What the operations themselves reported.
    for op in by_id.values():
        if (
            op.ok
            and op.kind in (*WRITES, *GROUP_KINDS, "delete", *REWRITES)
            and isinstance(op.result, dict)
        ):
            claim(op.result.get("version"), op, f"{op.kind} op {op.id} reported")
    # 2. What the kept versions' messages say.
    moves_by_dest = {op.args.get("dest"): op for op in by_id.values() if op.kind == "move"}
    for v in observation["versions"]:
        message = v.get("message") or ""
        named: Op | None = None
        if message.startswith("op ") and message[3:].isdigit():
            named = by_id.get(int(message[3:]))
        elif message.startswith("moved to "):
            named = moves_by_dest.get(message[len("moved to ") :])
        if named is None:
            add(
                Anomaly(
                    "version-without-op",
                    f"kept version {v['number']} ({v['operation']}, "
                    f"message {message!r}) names no operation of the history",
                    (),
                    (),
                    v["number"],
                )
            )
            continue
        claim(v["number"], named, f"the log's message {message!r} names")
        if named.ok is False:
            add(
                Anomaly(
                    "failed-op-left-version",
                    f"{named.kind} op {named.id} failed "
                    f"({error_name(named)}) but version {v['number']} carries its message",
                    (named.id,),
                    (),
                    v["number"],
                )
            )
    # 3. Committed jobs name versions too, also after those versions expired.
    job_owner = {
        op.result["job"]: op
        for op in by_id.values()
        if op.ok
        and isinstance(op.result, dict)
        and op.result.get("job") is not None
        and op.kind != "copy"
    }
    for job in observation["jobs"]:
        if job["state"] != "committed" or job["version"] is None:
            continue
        owner = job_owner.get(job["id"])
        shardless = _SHARDLESS.get(job["description"])
        if owner is None and shardless is not None:
            owner = next(
                (
                    o
                    for o in by_id.values()
                    if o.kind == shardless and o.ok and o.result.get("version") == job["version"]
                ),
                None,
            )
        if owner is not None:
            claim(job["version"], owner, f"committed job {job['id']} of")
        elif job["version"] not in claims:
            add(
                Anomaly(
                    "version-without-op",
                    f"job {job['id']} ({job['description']}) committed "
                    f"version {job['version']}, which no successful operation reports",
                    (),
                    (),
                    job["version"],
                )
            )
            claims[job["version"]] = []
    # Moves whose version expired: give them the versions nobody else claims, in order.
    moves_left = sorted(
        (o for o in by_id.values() if o.kind == "move" and o.ok and not _claims_any(claims, o)),
        key=lambda o: o.t0,
    )
    # An operation whose process died may have made any version nobody claims.
    indeterminate = any(not op.done for op in by_id.values())
    for version in range(1, model.latest + 1):
        owners = claims.get(version, [])
        if len(owners) > 1:
            add(
                Anomaly(
                    "two-ops-one-version",
                    f"version {version} is claimed by "
                    + ", ".join(f"{o.kind} op {o.id}" for o in owners),
                    tuple(o.id for o in owners),
                    (),
                    version,
                )
            )
        if owners:
            model.made_by[version] = owners[0]
        elif version not in claims and moves_left:
            model.made_by[version] = moves_left.pop(0)
        else:
            model.made_by[version] = None
            if version not in claims and not indeterminate:
                add(
                    Anomaly(
                        "version-without-op",
                        f"version {version} was made by no operation of the history",
                        (),
                        (),
                        version,
                    )
                )
    # 4. Every successful operation that must commit a version has one (moves: one each).
    made = {op.id for op in model.made_by.values() if op is not None}
    for op in by_id.values():
        if op.ok and _must_commit(op) and op.id not in made:
            add(
                Anomaly(
                    "op-without-version",
                    f"{op.kind} op {op.id} succeeded but no version is its",
                    (op.id,),
                )
            )
    # 5. Expiries, then the states.
    for op in by_id.values():
        if op.kind == "expire" and op.ok:
            for v in op.result.get("expired", []):
                model.expired_by.setdefault(int(v), []).append(op)
    _apply_all(model, add)
    return model


_SHARDLESS = {"delete_keys": "delete", "drop_group": "drop_group"}
"""Descriptions of the jobs of versions without shards -> the kind of operation that makes them."""


def _claims_any(claims: dict[int, list[Op]], op: Op) -> bool:
    return any(op in owners for owners in claims.values())


def _must_commit(op: Op) -> bool:
    if op.kind in (*WRITES, *GROUP_KINDS, "delete", "move"):
        return True
    return (
        op.kind in REWRITES and isinstance(op.result, dict) and op.result.get("version") is not None
    )


def error_name(op: Op) -> str:
    """The class name of the error ``op`` failed with (``?`` if none was logged)."""
    return op.error[0][0] if op.error else "?"


def _apply_all(model: Model, add: Callable[[Anomaly], None]) -> None:
    """``states[v]`` for every version, checking each commit was allowed on version ``v - 1``."""
    model.bases, model.groups = [{}], [None]
    for version in range(1, model.latest + 1):
        op = model.made_by.get(version)
        base, group = dict(model.bases[-1]), model.groups[-1]
        group = None if group is None else dict(group)
        if op is not None:  # an unknown operation: assumed no change (reported above)
            group = _apply(op, base, group, version, functools.partial(_refuse, add, op, version))
        model.bases.append(base)
        model.groups.append(group)
    model.states = [
        {k: merged(v, (g or {}).get(k)) for k, v in b.items()}
        for b, g in zip(model.bases, model.groups, strict=True)
    ]


def _apply(
    op: Op,
    base: dict[str, str],
    group: dict[str, str] | None,
    version: int,
    refuse: Callable[..., None],
) -> dict[str, str] | None:
    """Apply ``op``'s commit of ``version`` to ``base`` (in place); the group after it."""
    v0 = version - 1
    if op.kind in WRITES:
        keys = list(op.args["keys"])
        live = sorted(k for k in keys if k in base)
        if op.kind in ("append", "create") and live:
            refuse(f"{live} were live at version {v0} (on_duplicate=error)", live)
        if op.kind == "create" and base:
            refuse("the dataset had records")
        if op.kind == "overwrite":
            base.clear()
        for k in keys:
            if op.kind != "skip" or k not in base:
                base[k] = f"{op.id}:{k}"
        if op.kind == "overwrite" and group is not None:  # groups keep the keys it has
            group = {k: v for k, v in group.items() if k in base}
    elif op.kind == "delete":
        missing = sorted(k for k in op.args["keys"] if k not in base)
        if missing and not op.args.get("missing_ok"):
            refuse(f"{missing} were not live at version {v0} (missing_ok=False)", missing)
        for k in op.args["keys"]:
            base.pop(k, None)
            if group is not None:  # every group's record of the key goes with it
                group.pop(k, None)
    elif op.kind == "add_entries":
        group = _add_entries(op, base, group, version, refuse)
    elif op.kind == "drop_group":
        if group is None:
            refuse(f"the dataset had no group at version {v0}")
        group = None
    elif op.kind == "fold" and group is not None and _folded(op):
        # Each key's entry into its base record (a key without a base keeps none), the group gone.
        for k, cap in group.items():
            if k in base:
                base[k] = merged(base[k], cap)
        group = None
    # compact, move, a fold without a group: no visible change.
    return group


def _folded(op: Op) -> bool:
    """Whether fold ``op`` folded the group: the groups are chosen when it begins, so a group
    added while it ran is not folded (unknown, for an operation whose process died: assumed)."""
    if op.ok and isinstance(op.result, dict):
        return bool(op.result.get("folded"))
    return True


def _refuse(
    add: Callable[[Anomaly], None], op: Op, version: int, why: str, keys: Iterable[str] = ()
) -> None:
    """A commit the model does not allow: ``op`` committed ``version`` though ``why``."""
    keys = tuple(keys)
    add(
        Anomaly(
            "commit-not-allowed",
            f"{op.kind} op {op.id} committed version {version} though {why}",
            (op.id,),
            keys,
            version,
        )
    )


def _add_entries(
    op: Op,
    base: dict[str, str],
    group: dict[str, str] | None,
    version: int,
    refuse: Callable[..., None],
) -> dict[str, str]:
    """The group after ``add_entries`` op ``op`` committed ``version`` (its refusals checked)."""
    keys, mode = list(op.args["keys"]), op.args["mode"]
    if mode == "replace" and group is None:
        refuse(f"the dataset had no group at version {version - 1} (mode=replace)")
    unknown = sorted(k for k in keys if k not in base)
    if unknown and op.args["on_missing"] == "error":
        refuse(f"{unknown} had no base record at version {version - 1} (on_missing=error)", unknown)
    out = dict(group or {})
    known = [k for k in keys if k in base]
    folded = sorted(k for k in known if base_has_entry(base[k]))
    if folded and not op.args.get("replace_entries"):
        refuse(f"{folded} held the entry in their base at version {version - 1} (a fold)", folded)
    dup = sorted(k for k in known if k in out)
    if mode == "append" and dup:
        refuse(f"{dup} were in the group at version {version - 1} (mode=append)", dup)
    for k in known:
        out[k] = f"{op.id}:{k}"
    return out
