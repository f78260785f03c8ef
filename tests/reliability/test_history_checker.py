"""The concurrent-history checker on hand-made histories: it reports what it should, only that.

Each test builds a small history (operations with their windows, results
and errors), the observation a correct catalog would give after it, and
then breaks one thing: a read, a version's data, an outcome. The checker
must stay silent on the correct history and name the broken thing, with
the operations and keys involved. No catalog, no processes: milliseconds.
The end-to-end self-check (planted bugs in real histories) is
``test_history.py``.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shardcat.testing.history import Op, check_history
from shardcat.testing.history.model import build_model

KEYS = ["k00", "k01", "k02", "k03"]
KEYERR = ["KeyNotFoundError", "ShardcatError", "KeyError", "Exception"]


def _op(
    i: int,
    kind: str,
    args: dict[str, Any],
    t0: float,
    t1: float,
    result: Any = None,
    error: str | None = None,
) -> Op:
    names = None if error is None else ([error, "ShardcatError", "Exception"], "boom")
    if error == "ValueError":
        names = (["ValueError", "Exception"], "boom")
    return Op(i, 1, kind, args, t0, t1, error is None, result, names)


def _history() -> list[Op]:
    """Versions: 1 = {k00, k01} (op 0), 2 = +k02 (op 1), 3 = -k00 (op 2), 4 = compact (op 3)."""
    return [
        _op(0, "append", {"keys": ["k00", "k01"]}, 0, 1, {"version": 1, "job": 1}),
        _op(1, "append", {"keys": ["k02"]}, 2, 3, {"version": 2, "job": 2}),
        _op(2, "delete", {"keys": ["k00"], "missing_ok": False}, 4, 5, {"version": 3}),
        _op(3, "compact", {"min_live": 0.5}, 6, 7, {"version": 4, "job": 3}),
    ]


def _observation(ops: list[Op]) -> dict[str, Any]:
    """What a correct catalog shows after ``ops``: every version kept, read back exactly."""
    latest = max(
        op.result["version"] for op in ops if op.ok and op.result and "version" in op.result
    )
    model = build_model(ops, {"latest": latest, "versions": [], "jobs": _jobs(ops)})
    states = {str(v): dict(model.states[v]) for v in range(1, latest + 1)}
    return {
        "latest": latest,
        "root_url": "/data/h",
        "versions": [
            {
                "number": v,
                "operation": model.made_by[v].kind,
                "message": f"op {model.made_by[v].id}",
                "job_id": None,
                "total_records": model.records(v),
                "tags": [],
            }
            for v in range(latest, 0, -1)
        ],
        "jobs": _jobs(ops),
        "states": states,
        "streams": {v: sorted([k, val] for k, val in s.items()) for v, s in states.items()},
        "tags": {},
        "latest_state": dict(model.states[latest]),
        "keys": sorted(model.states[latest]),
        "count": len(model.states[latest]),
        "gone": {},
        "copies": {},
    }


def _jobs(ops: list[Op]) -> list[dict[str, Any]]:
    return [
        {
            "id": op.result["job"],
            "state": "committed",
            "version": op.result["version"],
            "description": "w",
        }
        for op in ops
        if op.ok and op.kind != "copy" and isinstance(op.result, dict) and op.result.get("job")
    ]


def _kinds(ops: list[Op], obs: dict[str, Any]) -> list[str]:
    return [a.kind for a in check_history(ops, obs, KEYS).anomalies]


def test_a_correct_history_has_no_anomaly_and_counts_what_it_checked() -> None:
    ops = _history()
    ops.append(
        _op(10, "get_many", {"at": "latest"}, 7.5, 8, {"state": {"k01": "0:k01", "k02": "1:k02"}})
    )
    ops.append(
        _op(11, "get", {"at": "version", "version": 1, "key": "k00"}, 8, 9, {"value": "0:k00"})
    )
    report = check_history(ops, _observation(ops), KEYS)
    assert report.anomalies == []
    assert report.reads > 2
    assert report.pairs >= len(KEYS) * 4


def test_a_read_overlapping_a_commit_may_see_either_side() -> None:
    ops = _history()
    before = {"k00": "0:k00", "k01": "0:k01"}
    after = {**before, "k02": "1:k02"}
    ops.append(_op(10, "get_many", {"at": "latest"}, 2.5, 2.6, {"state": before}))
    ops.append(_op(11, "get_many", {"at": "latest"}, 2.7, 2.8, {"state": after}))
    assert _kinds(ops, _observation(ops)) == []


def test_a_stale_read_is_not_linearizable() -> None:
    ops = _history()
    # Version 3 (k00 deleted) completed at 5; a read that began at 5.5 still sees k00.
    ops.append(_op(10, "get", {"at": "latest", "key": "k00"}, 5.5, 5.6, {"value": "0:k00"}))
    report = check_history(ops, _observation(ops), KEYS)
    (a,) = report.anomalies
    assert a.kind == "wrong-read"
    assert a.keys == ("k00",)
    assert {10, 0, 2} <= set(a.ops)  # the read, who wrote the value, who deleted it


def test_a_deleted_key_back_at_a_compaction_names_the_compaction() -> None:
    ops = _history()
    obs = _observation(ops)
    obs["states"]["4"]["k00"] = "0:k00"  # the compaction's version serves the deleted key
    obs["latest_state"]["k00"] = "0:k00"
    report = check_history(ops, obs, KEYS)
    kinds = {a.kind for a in report.anomalies}
    assert kinds == {"wrong-version"}
    first = report.anomalies[0]
    assert first.version == 4 and first.keys == ("k00",)
    assert "compact op 3 (version 4)" in first.detail  # the suspect rewrite
    assert {3, 0, 2} <= set(first.ops)


def test_a_read_mixing_two_versions_is_reported() -> None:
    ops = _history()
    torn = {"k00": "0:k00", "k01": "0:k01", "k02": "1:k02"}  # version 2 ...
    del torn["k01"]  # ... missing a key no version ever deleted
    ops.append(_op(10, "get_many", {"at": "latest"}, 2.5, 4.5, {"state": torn}))
    assert _kinds(ops, _observation(ops)) == ["wrong-read"]


def test_a_failed_operation_must_leave_no_version() -> None:
    ops = _history()
    ops[2] = _op(2, "delete", {"keys": ["k00"], "missing_ok": False}, 4, 5, None, "CatalogError")
    obs = _observation(_history())  # the catalog has its version all the same
    assert "failed-op-left-version" in _kinds(ops, obs)


def test_a_successful_operation_must_leave_a_version() -> None:
    ops = _history()
    ops.append(_op(12, "delete", {"keys": ["k01"], "missing_ok": True}, 8, 9, {"version": None}))
    assert _kinds(ops, _observation(_history())) == ["op-without-version"]


def test_errors_must_be_typed_and_explained() -> None:
    ops = _history()
    # k02 was live throughout: a DuplicateKeyError is explained; k03 never was: it is not.
    ops.append(_op(10, "append", {"keys": ["k02"]}, 8, 9, None, "DuplicateKeyError"))
    ops.append(_op(11, "append", {"keys": ["k03"]}, 8, 9, None, "DuplicateKeyError"))
    ops.append(
        _op(12, "delete", {"keys": ["k03"], "missing_ok": False}, 8, 9, None, "KeyNotFoundError")
    )
    ops.append(_op(13, "compact", {"min_live": 1.0}, 8, 9, None, "ValueError"))
    report = check_history(ops, _observation(_history()), KEYS)
    assert [(a.kind, a.ops) for a in report.anomalies] == [
        ("unexplained-error", (11,)),
        ("untyped-error", (13,)),
    ]


def test_a_commit_the_model_forbids_is_reported() -> None:
    ops = _history()
    # An on_duplicate="error" append of k01, live at version 4, that committed version 5.
    ops.append(_op(10, "append", {"keys": ["k01"]}, 8, 9, {"version": 5, "job": 4}))
    assert "commit-not-allowed" in _kinds(ops, _observation(ops))


def test_expired_versions_answer_version_not_found_and_kept_ones_stay_readable() -> None:
    ops = _history()
    ops.append(_op(10, "expire", {"keep_last": 2}, 8, 9, {"expired": [1, 2]}))
    obs = _observation(ops)
    obs["versions"] = [v for v in obs["versions"] if v["number"] > 2]
    for n in ("1", "2"):
        del obs["states"][n], obs["streams"][n]
    obs["gone"] = {"1": "VersionNotFoundError", "2": "VersionNotFoundError"}
    assert _kinds(ops, obs) == []
    broken = copy.deepcopy(obs)
    broken["gone"]["1"] = "served"
    assert _kinds(ops, broken) == ["expired-still-readable"]
    broken = copy.deepcopy(obs)
    broken["states"]["3"] = {"error": ["ShardNotFoundError", "gc removed it"]}
    assert _kinds(ops, broken) == ["kept-version-unreadable"]
    # A read at version 1 that began after the expiry completed must not be served.
    ops.append(
        _op(11, "get", {"at": "version", "version": 1, "key": "k01"}, 9.5, 9.6, {"value": "0:k01"})
    )
    assert _kinds(ops, obs) == ["wrong-read"]


def test_an_expiry_must_spare_tagged_and_newest_versions() -> None:
    ops = _history()
    ops.append(_op(10, "tag", {"name": "t1", "version": 2}, 7.1, 7.2, {"version": 2}))
    ops.append(_op(11, "expire", {"keep_last": 3}, 8, 9, {"expired": [2, 3]}))
    obs = _observation(ops)
    obs["versions"] = [v for v in obs["versions"] if v["number"] not in (2, 3)]
    obs["gone"] = {"2": "VersionNotFoundError", "3": "VersionNotFoundError"}
    for n in ("2", "3"):
        del obs["states"][n], obs["streams"][n]
    anomalies = check_history(ops, obs, KEYS).anomalies
    details = sorted(a.detail for a in anomalies if a.kind == "expired-wrongly")
    assert len(details) == 2
    assert "tag t1 named it throughout" in details[0]
    assert "keep_last=3" in details[1]


def test_a_copy_must_equal_its_source_at_a_version_of_its_window() -> None:
    ops = _history()
    ops.append(_op(10, "copy", {"target": "h-c10", "dest": "/c/10"}, 3.5, 3.9, {"job": 9}))
    obs = _observation(ops)
    good = {"k00": "0:k00", "k01": "0:k01", "k02": "1:k02"}  # version 2
    obs["copies"] = {"10": {"exists": True, "versions": [{"number": 1}], "state": good, "count": 3}}
    assert _kinds(ops, obs) == []
    obs["copies"]["10"]["state"] = {"k01": "0:k01", "k02": "1:k02"}  # version 3: after the copy
    obs["copies"]["10"]["count"] = 2
    assert _kinds(ops, obs) == ["copy-differs"]


@pytest.mark.parametrize("error", ["ShardNotFoundError", "StorageError"])
def test_a_read_failing_on_a_missing_file_is_explained_only_by_a_racing_gc_or_move(
    error: str,
) -> None:
    ops = _history()
    ops.append(_op(10, "get", {"at": "latest", "key": "k01"}, 8, 9, None, error))
    report = check_history(ops, _observation(_history()), KEYS)
    assert [a.kind for a in report.anomalies] == ["read-failed"]
    ops.append(_op(11, "gc", {}, 8.5, 8.6, {"deleted": 1, "errors": []}))
    report = check_history(ops, _observation(_history()), KEYS)
    assert report.anomalies == []
    assert sum(report.tolerated.values()) == 1


# --- column groups: add_entries and drop_group (docs/GROUPS.md) ----------------------------


def _group_history() -> list[Op]:
    """``_history`` then: 5 = group g gets k01, k02 (k03 has no base record: skipped),
    6 = -k01 (its group entry too), 7 = k02's base replaced (its entry kept), 8 = drop g."""
    entries = {"keys": ["k01", "k02", "k03"], "mode": "append", "on_missing": "skip"}
    return [
        *_history(),
        _op(20, "add_entries", entries, 8, 9, {"version": 5, "job": 20, "skipped": 1}),
        _op(21, "delete", {"keys": ["k01"], "missing_ok": False}, 10, 11, {"version": 6}),
        _op(22, "replace", {"keys": ["k02"]}, 12, 13, {"version": 7, "job": 22}),
        _op(23, "drop_group", {}, 14, 15, {"version": 8}),
    ]


def test_a_versions_state_holds_the_base_and_the_group_entries() -> None:
    ops = _group_history()
    model = build_model(ops, {"latest": 8, "versions": [], "jobs": _jobs(ops)})
    assert model.anomalies == []
    assert model.states[5] == {"k01": "0:k01|20:k01", "k02": "1:k02|20:k02"}
    assert model.states[6] == {"k02": "1:k02|20:k02"}
    assert model.states[7] == {"k02": "22:k02|20:k02"}  # a base replace keeps the entry
    assert model.states[8] == {"k02": "22:k02"}
    assert [model.records(v) for v in (4, 5, 6, 7, 8)] == [2, 4, 2, 2, 1]
    ops.append(_op(30, "get", {"at": "version", "version": 7, "key": "k02"}, 16, 17,
                   {"value": "22:k02|20:k02"}))  # fmt: skip
    assert _kinds(ops, _observation(ops)) == []
    ops[4].result["skipped"] = 0  # k03 had no base record: it was skipped
    assert _kinds(ops, _observation(ops)) == ["wrong-count"]


def test_a_dropped_groups_entry_still_read_is_reported() -> None:
    ops = _group_history()
    obs = _observation(ops)
    ops.append(_op(30, "get", {"at": "latest", "key": "k02"}, 16, 17, {"value": "22:k02|20:k02"}))
    (a,) = check_history(ops, obs, KEYS).anomalies
    assert a.kind == "wrong-read" and a.keys == ("k02",) and a.version == 8
    assert {30, 23} <= set(a.ops)  # the read, and the drop that last changed k02
    assert "(since version 8, op 23)" in a.detail
    broken = copy.deepcopy(obs)
    broken["states"]["8"]["k02"] = "22:k02|20:k02"  # the drop's version still serves it
    broken["versions"][0]["total_records"] = 2
    assert sorted(_kinds(_group_history(), broken)) == ["wrong-count", "wrong-version"]


def test_a_group_commit_the_model_forbids_is_reported() -> None:
    base = _history()  # version 4: k01, k02; no group
    bad = [
        # k00 was deleted at version 3: on_missing="error" must refuse it
        {"keys": ["k00", "k01"], "mode": "append", "on_missing": "error"},
        # no group to replace entries of
        {"keys": ["k01"], "mode": "replace", "on_missing": "skip"},
    ]
    for args in bad:
        ops = [*base, _op(20, "add_entries", args, 8, 9, {"version": 5, "job": 20})]
        assert "commit-not-allowed" in _kinds(ops, _observation(ops)), args
    ops = [*base, _op(20, "drop_group", {}, 8, 9, {"version": 5})]
    assert "commit-not-allowed" in _kinds(ops, _observation(ops))
    # append of keys the group has already (version 5 gave k01 its entry)
    again = {"keys": ["k01"], "mode": "append", "on_missing": "error"}
    ops = [*_group_history()[:5], _op(30, "add_entries", again, 10, 11, {"version": 6, "job": 30})]
    assert "commit-not-allowed" in _kinds(ops, _observation(ops))


def test_group_errors_must_be_explained_by_the_history() -> None:
    ops = _history()  # no group; k00 not live after version 3
    ops += [
        _op(20, "add_entries", {"keys": ["k01"], "mode": "replace", "on_missing": "error"},
            8, 9, None, "GroupNotFoundError"),
        _op(21, "add_entries", {"keys": ["k00"], "mode": "append", "on_missing": "error"},
            8, 9, None, "UnknownKeysError"),
        _op(22, "drop_group", {}, 8, 9, None, "GroupNotFoundError"),
        # unexplained: skip never refuses unknown keys; the group did not exist to hold k01
        _op(23, "add_entries", {"keys": ["k00"], "mode": "append", "on_missing": "skip"},
            8, 9, None, "UnknownKeysError"),
        _op(24, "add_entries", {"keys": ["k01"], "mode": "append", "on_missing": "skip"},
            8, 9, None, "DuplicateKeyError"),
    ]  # fmt: skip
    report = check_history(ops, _observation(_history()), KEYS)
    assert [(a.kind, a.ops) for a in report.anomalies] == [
        ("unexplained-error", (23,)),
        ("unexplained-error", (24,)),
    ]
    # Once the group holds k01 and is live, a drop refused for "no group" is unexplained.
    ops = [*_group_history()[:5], _op(30, "drop_group", {}, 10, 11, None, "GroupNotFoundError")]
    assert _kinds(ops, _observation(_group_history()[:5])) == ["unexplained-error"]
