"""A concurrent-history checker, in the spirit of Jepsen's Elle: several processes change one
dataset at once; every operation is logged; a model built from the committed versions says
what every read should have returned and which outcomes were allowed.

>>> from shardcat.testing.history import HistoryConfig, run_history  # doctest: +SKIP
>>> result = run_history(HistoryConfig(catalog_url, base_url, seed=1, scheduler=address), tmp)  # doctest: +SKIP
>>> result.report.anomalies  # doctest: +SKIP
[]

Parts: :mod:`.ops` (configuration, operations, seeded plans), :mod:`.worker`
(one process: run and log), :mod:`.model` (versions -> operations ->
states), :mod:`.checker` (reads, outcomes and the final catalog against the
model), :mod:`.observe` (the final reads), :mod:`.runner` (one history,
dumped as JSON when the check fails), :mod:`.bugs` (planted bugs and forced
schedules that show the checker catches what it should). docs/RELIABILITY.md,
"Concurrent histories", says what is checked and how to run it.
"""

from __future__ import annotations

from .checker import CheckReport, check_history, summarize
from .model import Anomaly
from .ops import WEIGHTS, HistoryConfig, Op
from .runner import HistoryResult, check_dump, run_history

__all__ = [
    "WEIGHTS",
    "Anomaly",
    "CheckReport",
    "HistoryConfig",
    "HistoryResult",
    "Op",
    "check_dump",
    "check_history",
    "run_history",
    "summarize",
]
