"""The demo times lookups as users meet them: warm, after one untimed first call."""

from __future__ import annotations

import time

import pytest

from shardcat.demo import DemoReport, time_warm


def test_time_warm_leaves_the_cold_first_call_out() -> None:
    calls: list[int] = []

    def call(arg: int) -> None:
        calls.append(arg)
        if len(calls) == 1:  # a cold first call: opening files, connecting, compiling SQL
            time.sleep(0.3)

    seconds = time_warm(call, [1, 2, 3])
    assert calls == [1, 2, 3]
    assert seconds < 0.25


def test_time_warm_times_every_call_after_the_first() -> None:
    seconds = time_warm(lambda delay: time.sleep(delay), [0.0, 0.1, 0.1])
    assert 0.2 <= seconds < 0.5


@pytest.mark.parametrize("args", [[], [1]])
def test_time_warm_refuses_to_time_nothing(args: list[int]) -> None:
    with pytest.raises(ValueError, match="warm-up"):
        time_warm(lambda _: None, args)


def test_the_report_says_the_figures_are_warm() -> None:
    report = DemoReport(lookups=200, lookup_seconds=0.2, batch=1000, batch_seconds=0.05)
    lines = "\n".join(report.lines())
    assert "1.00 ms per key" in lines and "untimed warm-up lookup" in lines
    assert "1,000 random keys in one batch in 50 ms (20,000 keys/s" in lines
    assert "untimed warm-up batch" in lines
