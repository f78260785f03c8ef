"""The checker: every read, every outcome and the final catalog against the model.

* A read at a pinned version or tag equals that version's state exactly; a
  read of the latest equals the state of some version that was the latest
  at a moment between its invocation and completion (linearizable against
  the order of commits). One answer is one state: ``get_many``, ``keys``,
  ``count`` and a streamed ``read`` never mix two versions.
* An expired version answers ``VersionNotFoundError``; every kept version
  stays readable (gc deleted nothing a kept version needs) and equals its
  state; an expiry never drops the latest, a tagged or one of the newest
  ``keep_last`` versions.
* A failed operation left no version (its message is on none) and no
  change (the versions after it equal the model, which never applies it);
  its error is a typed one that the history explains (a duplicate key that
  was live, a conflict with a commit inside its window, ...). A successful
  one made exactly one version (none where it had nothing to do).
* A copy equals its source at a version that was the latest while it ran.
* Column groups: every read's sample is its base and its group entry
  (:func:`~.ops.sample_value`), compared with the model's merged state; a
  group commit the rules refuse is reported by the model; ``add_entries``
  skips exactly the keys without a base record at its commit; a failed
  ``add_entries`` or ``drop_group`` is explained only by the group's state
  (none to replace entries of or to drop), a key without a base record
  (``on_missing="error"``), a key the group had (``mode="append"``), a key
  whose base record holds the entry (a fold put it there), a commit changing
  its keys inside its window or a move of the folder; a failed ``fold`` by a
  commit changing its group or its keys' base records (KeyConflictError) or
  dropping its group (CommitConflictError) inside its window.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .model import INF, Anomaly, Model, base_has_entry, build_model, error_name, writer_of
from .ops import FILE_REMOVERS, GROUP_KINDS, READS, WRITES, Op

__all__ = ["CheckReport", "check_history", "summarize", "tag_candidates"]

# A file a read (or a job reading shards) needed was removed under it.
_FILE_GONE = ("ShardNotFoundError", "StorageError", "ChecksumError")


@dataclass
class CheckReport:
    """What the checker did and found."""

    operations: int = 0
    reads: int = 0
    """Reads compared with the model (during the history and after it)."""
    pairs: int = 0
    """(version, key) pairs compared with the model."""
    outcomes: Counter[str] = field(default_factory=Counter)
    """``kind:ok`` / ``kind:ErrorName`` counts."""
    tolerated: Counter[str] = field(default_factory=Counter)
    """Typed errors the history explains (a read that raced gc or a move, ...)."""
    anomalies: list[Anomaly] = field(default_factory=list)
    versions: int = 0

    @property
    def ok(self) -> bool:
        return not self.anomalies


def check_history(ops: list[Op], observation: dict[str, Any], keys: list[str]) -> CheckReport:
    """Check a history (every operation, the setup's too) and the final observation."""
    model = build_model(ops, observation)
    report = CheckReport(operations=len(ops), versions=model.latest)
    report.anomalies.extend(model.anomalies)
    removers = [op for op in ops if op.kind in FILE_REMOVERS]
    for op in sorted(ops, key=lambda o: o.t0):
        report.outcomes[f"{op.kind}:{'ok' if op.ok else error_name(op)}"] += 1
        if not op.done:
            continue
        if op.kind in READS:
            _check_read(model, op, keys, removers, report)
        elif not op.ok:
            _check_failure(model, op, removers, report)
        else:
            _check_success(model, op, report)
    _check_final(model, observation, keys, report)
    report.anomalies.sort(key=lambda a: (a.version or 0, a.ops))
    return report


# --- reads ---------------------------------------------------------------------------


def _read_versions(model: Model, op: Op) -> tuple[list[int], bool]:
    """The versions a read may have seen, and whether "no such version" was possible."""
    a, b, at = op.t0, op.end, op.args.get("at", "latest")
    if at == "version":
        v = int(op.args["version"])
        return ([v] if model.may_exist(v, a, b) else []), model.may_be_absent(v, a, b)
    if at == "tag":
        values = tag_candidates(model, op.args["tag"], a, b)
        found = [v for v in values if v is not None and model.may_exist(v, a, b)]
        return found, None in values or any(
            v is not None and model.may_be_absent(v, a, b) for v in values
        )
    return model.latest_candidates(a, b), False


def _answer(op: Op, keys: list[str]) -> tuple[dict[str, str | None], str | None]:
    """A read's answer as key -> value (None: absent) over the keys it covers; or a defect."""
    r = op.result
    if op.kind == "get":
        return {op.args["key"]: r["value"]}, None
    if op.kind == "get_many":
        return {k: r["state"].get(k) for k in keys}, None
    if op.kind == "keys":
        got = r["keys"]
        return {k: ("present" if k in got else None) for k in keys}, _defect(got, keys)
    if op.kind == "read":
        pairs = [tuple(p) for p in r["pairs"]]
        return {k: dict(pairs).get(k) for k in keys}, _defect([k for k, _ in pairs], keys)
    return {}, None  # count


def _defect(names: list[str], keys: list[str]) -> str | None:
    """What a listing holds that no state can: a key twice, or a key no operation wrote."""
    if len(names) != len(set(names)):
        return "a key twice"
    strangers = sorted(set(names) - set(keys))
    return f"keys no operation wrote: {strangers[:5]}" if strangers else None


def _expected(model: Model, op: Op, v: int, keys: list[str]) -> dict[str, str | None]:
    state = model.states[v]
    if op.kind == "get":
        return {op.args["key"]: state.get(op.args["key"])}
    if op.kind == "keys":
        return {k: ("present" if k in state else None) for k in keys}
    return {k: state.get(k) for k in keys}


def _check_read(
    model: Model, op: Op, keys: list[str], removers: list[Op], rep: CheckReport
) -> None:
    versions, absent_ok = _read_versions(model, op)
    if not op.ok:
        name = op.error[0] if op.error else ["?"]
        if "VersionNotFoundError" in name and absent_ok:
            return
        if any(n in name for n in _FILE_GONE) and _overlapping(removers, op):
            rep.tolerated[f"{op.kind} raced {_kinds(removers, op)}: {name[0]}"] += 1
            return
        kind = "untyped-error" if "ShardcatError" not in name else "read-failed"
        rep.anomalies.append(
            Anomaly(
                kind,
                f"{op.kind} {_at(op)} failed: {name[0]}: {op.error[1] if op.error else ''}",
                (op.id,),
            )
        )
        return
    rep.reads += 1
    if op.kind == "count":
        rep.pairs += 1
        if any(len(model.states[v]) == op.result["count"] for v in versions):
            return
        rep.anomalies.append(
            Anomaly(
                "wrong-read",
                f"count {_at(op)} = {op.result['count']}; the "
                f"model allows {sorted({len(model.states[v]) for v in versions})}"
                f" (versions {versions})",
                (op.id,),
            )
        )
        return
    got, defect = _answer(op, keys)
    rep.pairs += len(got)
    if defect:
        rep.anomalies.append(
            Anomaly("wrong-read", f"{op.kind} {_at(op)} returned {defect}", (op.id,))
        )
    if any(_expected(model, op, v, keys) == got for v in versions):
        return
    if not versions:
        rep.anomalies.append(
            Anomaly(
                "wrong-read",
                f"{op.kind} {_at(op)} answered, but no version "
                "it asks for can have been kept while it ran",
                (op.id,),
            )
        )
        return
    rep.anomalies.append(_mismatch(model, op, got, versions, keys))


def _mismatch(
    model: Model, op: Op, got: dict[str, str | None], versions: list[int], keys: list[str]
) -> Anomaly:
    """The closest allowed version, and per differing key what the model says and who wrote what."""
    best = min(versions, key=lambda v: sum(_expected(model, op, v, keys)[k] != got[k] for k in got))
    want = _expected(model, op, best, keys)
    bad = sorted(k for k in got if want[k] != got[k])
    lines, involved = _explain_keys(model, bad, got, want, best)
    made = model.made_by.get(best)
    head = f"{op.kind} {_at(op)} matches no allowed version {versions}; nearest {best}" + (
        f" ({made.kind} op {made.id})" if made else ""
    )
    return Anomaly(
        "wrong-read", f"{head}: {lines}", tuple(dict.fromkeys([op.id, *involved])), tuple(bad), best
    )


def _explain_keys(
    model: Model,
    bad: list[str],
    got: dict[str, str | None],
    want: dict[str, str | None],
    version: int,
) -> tuple[str, list[int]]:
    """Per differing key: what was read (and who wrote it), what the model says (and since
    when, by whom), and the rewrites in between that may have brought the value back."""
    lines, involved = [], []
    for k in bad[:8]:
        writer = writer_of(got[k])
        last = model.who_last_changed(k, version)
        suspects = model.suspects(k, version) if got[k] is not None else []
        lines.append(
            f"{k}: got {got[k]!r}"
            + (f" (written by op {writer})" if writer is not None else "")
            + f", version {version} has {want[k]!r}"
            + (f" (since version {last[0]}, op {last[1]})" if last else "")
            + (
                "; rewritten since by "
                + ", ".join(f"{model.made_by[v].kind} op {o} (version {v})" for v, o in suspects)  # type: ignore[union-attr]
                if suspects
                else ""
            )
        )
        involved += [x for x in (writer, last[1] if last else None) if x is not None]
        involved += [o for _, o in suspects]
    more = f"; and {len(bad) - 8} more keys" if len(bad) > 8 else ""
    return "; ".join(lines) + more, involved


def _at(op: Op) -> str:
    at = op.args.get("at", "latest")
    what = f"of {op.args['key']} " if op.kind == "get" else ""
    if at == "version":
        return f"{what}at version {op.args['version']}"
    if at == "tag":
        return f"{what}at tag {op.args['tag']}"
    return f"{what}at the latest"


def _overlapping(others: list[Op], op: Op) -> list[Op]:
    return [o for o in others if o.id != op.id and o.t0 <= op.end and o.end >= op.t0]


def _kinds(others: list[Op], op: Op) -> str:
    return "/".join(sorted({o.kind for o in _overlapping(others, op)}))


# --- tags ----------------------------------------------------------------------------


def tag_candidates(model: Model, tag: str, a: float, b: float) -> set[int | None]:
    """What ``tag`` may have named at some moment of ``[a, b]`` (None: no such tag)."""
    events = [
        o
        for o in model.ops.values()
        if o.kind in ("tag", "untag") and o.args.get("name") == tag and (o.ok or not o.done)
    ]

    def superseded(t1: float) -> bool:  # another op on the tag happened wholly in (t1, a)
        return any(y.t0 > t1 and y.end < a for y in events)

    out: set[int | None] = set()
    if not any(e.end < a for e in events):
        out.add(None)
    for e in events:
        if e.t0 <= b and not superseded(e.end):
            out.add(None if e.kind == "untag" else int(e.args["version"]))
    return out


# --- failed and successful operations -------------------------------------------------------


def _check_failure(model: Model, op: Op, removers: list[Op], rep: CheckReport) -> None:
    """Is the error one the history explains? (No version carries it: checked by the model.)"""
    names = op.error[0] if op.error else ["?"]
    a, b = op.t0, op.end
    during = model.changed_during(a, b)
    if "ShardcatError" not in names:
        rep.anomalies.append(
            Anomaly(
                "untyped-error",
                f"{op.kind} op {op.id} failed with {names[0]}: {op.error[1] if op.error else ''}",
                (op.id,),
            )
        )
        return
    if any(n in names for n in _FILE_GONE) and _overlapping(removers, op):
        rep.tolerated[f"{op.kind} raced {_kinds(removers, op)}: {names[0]}"] += 1
        return
    if "CatalogLockedError" in names:
        rep.tolerated[f"{op.kind}: CatalogLockedError"] += 1
        return
    keys = set(op.args.get("keys", []))
    live = model.latest_candidates(a, b)
    explained = False
    if op.kind in ("append", "create") and "DuplicateKeyError" in names:
        explained = any(keys & model.states[v].keys() for v in live)
    elif op.kind in ("replace", "skip") and "KeyConflictError" in names:
        explained = any(keys & model.touched(v) for v in during)
    elif op.kind == "create" and "DatasetExistsError" in names:
        explained = True  # committed shards decide it, which the model does not see
    elif op.kind in WRITES and "DatasetRootError" in names:
        explained = _moved_since_drawn(model, op)
    elif op.kind == "overwrite" and "CommitConflictError" in names:
        explained = bool(during)
    elif op.kind == "move" and "CommitConflictError" in names:
        # A commit moved the version, or an expiry retired a shard it copied.
        explained = bool(during) or any(
            o.kind == "expire" and o.ok and o.t0 <= b and o.end >= a for o in model.ops.values()
        )
    elif op.kind == "delete" and "KeyNotFoundError" in names:
        explained = not op.args["missing_ok"] and any(keys - model.states[v].keys() for v in live)
    elif op.kind == "compact" and "KeyConflictError" in names:
        explained = any(model.touched(v) for v in during)
    elif op.kind == "fold" and "KeyConflictError" in names:
        # Its group's records, or the base records of their keys, changed while it ran.
        explained = any(model.touched(v) | model.group_touched(v) for v in during)
    elif op.kind == "fold" and "CommitConflictError" in names:
        # The group it folds was dropped (or folded) while it ran.
        explained = any(model.groups[v - 1] is not None and model.groups[v] is None for v in during)
    elif op.kind in GROUP_KINDS:
        explained = _group_failure_explained(model, op, names, live, during)
    elif op.kind == "tag" and "VersionNotFoundError" in names:
        explained = model.may_be_absent(int(op.args["version"]), a, b)
    elif op.kind == "untag" and "VersionNotFoundError" in names:
        explained = None in tag_candidates(model, op.args["name"], a, b)
    if not explained:
        rep.anomalies.append(
            Anomaly(
                "unexplained-error",
                f"{op.kind} op {op.id} failed with "
                f"{names[0]}, which the history does not explain: "
                f"{op.error[1] if op.error else ''}",
                (op.id,),
                tuple(sorted(keys)),
            )
        )


def _group_failure_explained(
    model: Model, op: Op, names: list[str], live: list[int], during: list[int]
) -> bool:
    """Whether the history explains why ``add_entries`` or ``drop_group`` failed (docs/GROUPS.md):
    no group to replace entries of or to drop, a key without a base record
    (``on_missing="error"``), a key already in the group (``mode="append"``), a commit
    inside its window that changed a key's group or base record, or a move of the folder."""
    keys = set(op.args.get("keys", []))
    if "GroupNotFoundError" in names:
        asked = op.kind == "drop_group" or op.args["mode"] == "replace"
        return asked and any(model.groups[v] is None for v in live)
    if op.kind == "drop_group":
        return False
    if "UnknownKeysError" in names:
        return op.args["on_missing"] == "error" and any(keys - model.bases[v].keys() for v in live)
    if "EntryExistsError" in names:  # a fold put the entry into those keys' base records
        return not op.args.get("replace_entries") and any(
            base_has_entry(model.bases[v].get(k, "")) for v in live for k in keys
        )
    if "DuplicateKeyError" in names:
        return op.args["mode"] == "append" and any(
            keys & (model.groups[v] or {}).keys() for v in live
        )
    if "KeyConflictError" in names:
        return any(keys & (model.group_touched(v) | model.touched(v)) for v in during)
    if "DatasetRootError" in names:
        return any(
            m.kind == "move" and m.ok and m.t0 <= op.end and m.end >= op.t0
            for m in model.ops.values()
        )
    return False


def _moved_since_drawn(model: Model, op: Op) -> bool:
    """Whether a move elsewhere may have committed after the write read the dataset's root.

    The root is read before the write's invocation, after its process's
    previous operation ended: a move ending since then (and starting before
    the write failed) explains an append refused for writing into the old folder.
    """
    drawn = max(
        (o.end for o in model.ops.values() if o.process == op.process and o.end <= op.t0),
        default=float("-inf"),
    )
    return any(
        m.kind == "move"
        and m.ok
        and m.end >= drawn
        and m.t0 <= op.end
        and str(m.args["dest"]).rstrip("/") != str(op.args.get("root", "")).rstrip("/")
        for m in model.ops.values()
    )


def _check_success(model: Model, op: Op, rep: CheckReport) -> None:
    a, b = op.t0, op.end
    if op.kind == "tag" and op.result["version"] != op.args["version"]:
        rep.anomalies.append(
            Anomaly(
                "wrong-tag",
                f"tag op {op.id} asked for version "
                f"{op.args['version']}, tagged {op.result['version']}",
                (op.id,),
            )
        )
    if op.kind == "untag" and op.result["version"] not in tag_candidates(
        model, op.args["name"], a, b
    ):
        rep.anomalies.append(
            Anomaly(
                "wrong-tag",
                f"untag op {op.id} removed tag "
                f"{op.args['name']} of version {op.result['version']}, which "
                "it never named while the op ran",
                (op.id,),
            )
        )
    if op.kind == "gc" and op.result.get("errors"):
        rep.anomalies.append(Anomaly("gc-error", f"gc op {op.id}: {op.result['errors']}", (op.id,)))
    if op.kind == "expire":
        _check_expire(model, op, rep)
    if op.kind == "add_entries":
        _check_skipped(model, op, rep)


def _check_skipped(model: Model, op: Op, rep: CheckReport) -> None:
    """``add_entries`` counts as skipped exactly its keys without a base record at its commit."""
    version = op.result.get("version")
    if not isinstance(version, int) or not 1 <= version <= model.latest:
        return  # reported by the model
    missing = sorted(set(op.args["keys"]) - model.bases[version - 1].keys())
    if op.result.get("skipped") != len(missing):
        rep.anomalies.append(
            Anomaly(
                "wrong-count",
                f"add_entries op {op.id} skipped {op.result.get('skipped')} keys; at version "
                f"{version - 1} {len(missing)} had no base record: {missing}",
                (op.id,),
                tuple(missing),
                version,
            )
        )


def _check_expire(model: Model, op: Op, rep: CheckReport) -> None:
    """Never the latest, a tagged version or one of the newest ``keep_last`` versions."""
    a, b = op.t0, op.end
    tags = {o.args["name"] for o in model.ops.values() if o.kind in ("tag", "untag")}
    for v in op.result.get("expired", []):
        newer = [
            u
            for u in range(v + 1, model.latest + 1)
            if model.window(u)[0] <= b
            and not any(e.end < a for e in model.expired_by.get(u, []) if e is not op)
        ]
        why = []
        if not newer:
            why.append("it was the latest")
        elif len(newer) < op.args["keep_last"]:
            why.append(
                f"at most {len(newer)} newer versions existed (keep_last={op.args['keep_last']})"
            )
        sure = [t for t in sorted(tags) if tag_candidates(model, t, a, b) == {v}]
        if sure:
            why.append(f"tag {sure[0]} named it throughout")
        if why:
            rep.anomalies.append(
                Anomaly(
                    "expired-wrongly",
                    f"expire op {op.id} expired version {v}, but {' and '.join(why)}",
                    (op.id,),
                    (),
                    v,
                )
            )


# --- after the history ---------------------------------------------------------------


def _check_final(model: Model, obs: dict[str, Any], keys: list[str], rep: CheckReport) -> None:
    kept = {v["number"]: v for v in obs["versions"]}
    for n, v in sorted(kept.items()):
        state = model.states[n] if n <= model.latest else {}
        _compare(rep, f"kept version {n}", obs["states"].get(str(n)), state, keys, model, n)
        stream = obs["streams"].get(str(n))
        if isinstance(stream, list):
            names = [k for k, _ in stream]
            if len(names) != len(set(names)):
                rep.anomalies.append(
                    Anomaly("wrong-version", f"read(version={n}) streamed a key twice", (), (), n)
                )
            stream = {k: val for k, val in stream}
        _compare(rep, f"read(version={n})", stream, state, keys, model, n)
        records = model.records(n) if n <= model.latest else 0
        if v["total_records"] != records:
            rep.anomalies.append(
                Anomaly(
                    "wrong-count",
                    f"log: version {n} has total_records "
                    f"{v['total_records']}, the model {records} (the base's and the group's)",
                    (),
                    (),
                    n,
                )
            )
    latest = model.states[model.latest]
    _compare(rep, "the latest", obs["latest_state"], latest, keys, model, model.latest)
    rep.reads += 2
    rep.pairs += 2
    if obs["keys"] != sorted(latest):
        rep.anomalies.append(
            Anomaly(
                "wrong-read",
                f"keys() after the history = {obs['keys']}, the model {sorted(latest)}",
                (),
                (),
                model.latest,
            )
        )
    if obs["count"] != len(latest):
        rep.anomalies.append(
            Anomaly(
                "wrong-count",
                f"count() after the history = {obs['count']}, the model {len(latest)}",
                (),
                (),
                model.latest,
            )
        )
    for n, how in sorted(obs["gone"].items(), key=lambda x: int(x[0])):
        if how != "VersionNotFoundError":
            rep.anomalies.append(
                Anomaly(
                    "expired-still-readable",
                    f"version {n} is not kept, yet a lookup there ended: {how}",
                    (),
                    (),
                    int(n),
                )
            )
        unexplained = int(n) <= model.latest and not model.expired_by.get(int(n))
        if unexplained and not any(not o.done for o in model.ops.values() if o.kind == "expire"):
            rep.anomalies.append(
                Anomaly(
                    "version-lost",
                    f"version {n} is gone but no expire reported expiring it",
                    (),
                    (),
                    int(n),
                )
            )
    _check_final_tags(model, obs, keys, rep)
    _check_copies(model, obs, keys, rep)
    _check_root(model, obs, rep)
    _check_bucket_history(model, obs, keys, rep)


def _compare(
    rep: CheckReport,
    what: str,
    got: Any,
    state: dict[str, str],
    keys: list[str],
    model: Model,
    version: int,
) -> None:
    rep.reads += 1
    if isinstance(got, dict) and "error" in got and isinstance(got["error"], list):
        rep.anomalies.append(
            Anomaly(
                "kept-version-unreadable",
                f"{what}: {got['error'][0]}: {got['error'][1]}",
                (),
                (),
                version,
            )
        )
        return
    got = got or {}
    rep.pairs += len(keys)
    bad = sorted(k for k in keys if got.get(k) != state.get(k))
    if not bad:
        return
    lines, involved = _explain_keys(
        model, bad, {k: got.get(k) for k in bad}, {k: state.get(k) for k in bad}, version
    )
    made = model.made_by.get(version)
    head = what + (f" ({made.kind} op {made.id})" if made else "")
    ops = tuple(dict.fromkeys(([made.id] if made else []) + involved))
    rep.anomalies.append(Anomaly("wrong-version", f"{head}: {lines}", ops, tuple(bad), version))


def _check_final_tags(model: Model, obs: dict[str, Any], keys: list[str], rep: CheckReport) -> None:
    named = {t: v["number"] for v in obs["versions"] for t in v["tags"]}
    tags = {o.args["name"] for o in model.ops.values() if o.kind in ("tag", "untag")}
    for t in sorted(tags | set(named)):
        allowed = tag_candidates(model, t, INF, INF)
        if named.get(t) not in allowed:
            rep.anomalies.append(
                Anomaly(
                    "wrong-tag",
                    f"after the history tag {t} names {named.get(t)}; the model allows {allowed}",
                )
            )
    for t, n in named.items():
        if n <= model.latest:
            _compare(rep, f"tag {t}", obs["tags"].get(t), model.states[n], keys, model, n)


def _check_copies(model: Model, obs: dict[str, Any], keys: list[str], rep: CheckReport) -> None:
    for op in model.ops.values():
        if op.kind != "copy" or not op.done:
            continue
        seen = obs["copies"].get(str(op.id), {"exists": False})
        if not op.ok:
            if seen.get("exists") and (seen.get("versions") or seen.get("state")):
                rep.anomalies.append(
                    Anomaly(
                        "failed-op-left-version",
                        f"copy op {op.id} failed "
                        f"but its target {op.args['target']} has versions "
                        f"{seen.get('versions')}",
                        (op.id,),
                    )
                )
            continue
        rep.reads += 1
        state = seen.get("state") if seen.get("exists") else None
        if not isinstance(state, dict) or len(seen.get("versions", [])) != 1:
            rep.anomalies.append(
                Anomaly(
                    "copy-differs",
                    f"copy op {op.id}: target {op.args['target']} has {seen}",
                    (op.id,),
                )
            )
            continue
        versions = model.latest_candidates(op.t0, op.end)
        rep.pairs += len(keys)
        if not any(state == model.states[v] for v in versions):
            best = min(
                versions, key=lambda v: len(set(state.items()) ^ set(model.states[v].items()))
            )
            bad = sorted(k for k in keys if state.get(k) != model.states[best].get(k))
            rep.anomalies.append(
                Anomaly(
                    "copy-differs",
                    f"copy op {op.id} equals the source at "
                    f"none of versions {versions}; nearest {best} differs at "
                    + ", ".join(
                        f"{k} (copy {state.get(k)!r}, source {model.states[best].get(k)!r})"
                        for k in bad[:8]
                    ),
                    (op.id,),
                    tuple(bad),
                    best,
                )
            )
        if seen.get("count") != len(state):
            rep.anomalies.append(
                Anomaly(
                    "wrong-count",
                    f"copy op {op.id}: count {seen.get('count')}, records {len(state)}",
                    (op.id,),
                )
            )


def _check_bucket_history(
    model: Model, obs: dict[str, Any], keys: list[str], rep: CheckReport
) -> None:
    """The manifests in the dataset's folder agree with the catalog, and rebuild every kept version."""
    got = obs.get("history")
    if got is None:  # a history dumped before manifests existed
        return
    if "error" in got:
        rep.anomalies.append(
            Anomaly("history-rebuild", f"rebuilding from the bucket failed: {got['error']}")
        )
        return
    for problem in got["problems"]:
        rep.anomalies.append(Anomaly("history-rebuild", f"verify: {problem}"))
    kept = [v["number"] for v in obs["versions"]]
    if got["versions"] != sorted(kept):
        rep.anomalies.append(
            Anomaly(
                "history-rebuild",
                f"the rebuild kept versions {got['versions']}, the catalog {sorted(kept)}",
            )
        )
    named = {t: v["number"] for v in obs["versions"] for t in v["tags"]}
    if got["tags"] != named:
        rep.anomalies.append(
            Anomaly("history-rebuild", f"the rebuild's tags {got['tags']}, the catalog's {named}")
        )
    for n in got["versions"]:
        state = model.states[n] if n <= model.latest else {}
        _compare(rep, f"rebuilt version {n}", got["states"].get(str(n)), state, keys, model, n)


def _check_root(model: Model, obs: dict[str, Any], rep: CheckReport) -> None:
    moves = [(v, op) for v, op in model.made_by.items() if op is not None and op.kind == "move"]
    if not moves:
        return
    _, last = max(moves, key=lambda x: x[0])
    if obs["root_url"].rstrip("/") != str(last.args["dest"]).rstrip("/"):
        rep.anomalies.append(
            Anomaly(
                "wrong-root",
                f"the dataset's root is {obs['root_url']}, "
                f"but the last move (op {last.id}) went to {last.args['dest']}",
                (last.id,),
            )
        )


def summarize(report: CheckReport) -> str:
    """One line: operations, reads, pairs, anomalies (and what was tolerated)."""
    tolerated = sum(report.tolerated.values())
    return (
        f"{report.operations} operations, {report.versions} versions, {report.reads} reads and "
        f"{report.pairs} (version, key) pairs checked, {len(report.anomalies)} anomalies"
        + (f", {tolerated} typed errors explained by a racing gc/move" if tolerated else "")
    )
