"""Bad input: damaged shards, tars and TARIDX files through every read path (issue: reliability).

Each case is a deterministic mutation (``shardcat.testing.mutations``) run in
a worker process capped at 2 GiB of address space, with 5 seconds per case
(``shardcat.testing.badinput``). Every read path must refuse with a typed
shardcat error or return exactly the original data; ``verify`` must never
call a damaged file clean. The long run (10,000+ cases) is
``benchmarks/reliability.py``; its table is in docs/RELIABILITY.md.
"""

from __future__ import annotations

import pytest

from shardcat.format.tar import tarwalker
from shardcat.testing.badinput import FAILURES, run_bad_input
from shardcat.testing.mutations import KINDS, mutations

# 2,000 cases in all, weighted to the native shard (the most read paths).
CASES = {"shard": 1000, "tar": 500, "taridx": 500}
DEADLINE = 600.0  # seconds per subject: a bound on the whole run, far above its usual time


# Tars run under both tar walkers (the workers are spawned: they read the variable).
SUBJECTS = [
    pytest.param(subject, walker, id=f"{subject}-{walker}" if walker else subject)
    for subject in sorted(CASES)
    for walker in (["compiled", "python"] if subject == "tar" else [None])
]


@pytest.mark.slow
@pytest.mark.parametrize(("subject", "walker"), SUBJECTS)
def test_damaged_files_are_refused_or_read_exactly(
    subject: str, walker: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if walker is not None:
        if walker not in tarwalker.available():
            pytest.skip("the compiled tar walker is not built")
        monkeypatch.setenv(tarwalker.ENV_VAR, walker)
    report = run_bad_input(subject, CASES[subject], deadline=DEADLINE)
    assert len(report.results) == CASES[subject], "the run hit its deadline"
    failures = [
        f"case {r.case} {r.kind} ({r.detail}): {r.outcome}: {r.message}" for r in report.failures
    ]
    assert failures == [], "\n".join(failures[:20])
    kinds = {kind for (_, kind) in report.kinds()}
    assert kinds == set(KINDS), "every kind of damage was tried"
    outcomes = {outcome for (_, outcome) in report.counts()}
    assert "refused" in outcomes or "mixed" in outcomes, "the damage was detected at all"
    assert report.slowest < 5.0


def test_the_harness_catches_every_kind_of_failure() -> None:
    report = run_bad_input("reliability.misbehaving:Misbehaving", 8, timeout=3.0)
    got = {r.kind: r.outcome for r in report.results}
    assert got == {
        "refuse": "refused",
        "serve": "intact",
        "wrong": "wrong-data",
        "untyped": "untyped",
        "hang": "hang",
        "crash": "crash",
        "allocate": "untyped",
    }
    assert {r.outcome for r in report.failures} == set(FAILURES)
    allocate = next(r for r in report.results if r.kind == "allocate")
    assert "MemoryError" in allocate.message  # the cap held: the machine was never asked for 3 GiB
    assert [r.case for r in report.results] == list(range(8))  # a new worker after each death


def test_mutations_are_deterministic_and_replayable() -> None:
    data = bytes(range(256)) * 8
    run = list(mutations(data, seed=5, count=40, structured=[(0, 64)]))
    again = list(mutations(data, seed=5, count=40, structured=[(0, 64)]))
    assert run == again
    one = list(mutations(data, seed=5, count=1, start=17, structured=[(0, 64)]))
    assert one == [run[17]]
    assert all(damaged != data for m, damaged in run if m.kind in ("truncate", "insert", "delete"))
    assert {m.kind for m, _ in run} == set(KINDS)
    with pytest.raises(ValueError, match="at least 16 bytes"):
        list(mutations(b"tiny", seed=1, count=1))
