"""The remote merge gap's rule (shardcat.storage.gap): the formula, the estimator, the read budget.

Pure functions and a running estimate fed with numbers: no store, no clock.
The estimator fed by real requests through the latency proxy is in
test_gap_proxy.py.
"""

from __future__ import annotations

import multiprocessing
import uuid

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardcat import config
from shardcat._ranges import merge_sorted
from shardcat.storage import gap
from shardcat.storage.gap import (
    MAX_GAP,
    MIN_GAP,
    PRIOR_BANDWIDTH,
    PRIOR_LATENCY,
    READ_BUDGET,
    Estimator,
    budget_gap,
    derived_gap,
)

KiB = 1024
BOTOCORE_POOL = 10  # requests in flight these cases assume (botocore's default pool)


# --- the formula ------------------------------------------------------------------------


def test_the_gap_is_latency_times_bandwidth_shared_by_the_requests_in_flight():
    # Same-region S3: 20 ms, 90 MB/s a connection, 10 in flight: 180 KB.
    assert derived_gap(0.020, 90e6, 10) == 180_000
    # Twice the latency or the bandwidth: twice the gap; twice the requests in flight: half.
    assert derived_gap(0.040, 90e6, 10) == 360_000
    assert derived_gap(0.020, 180e6, 10) == 360_000
    assert derived_gap(0.020, 90e6, 20) == 90_000
    # One request at a time: the whole latency's worth of transfer.
    assert derived_gap(0.005, 100e6, 1) == 500_000


def test_the_gap_is_clamped_to_its_bounds():
    assert derived_gap(0.0, 90e6, 10) == MIN_GAP  # no latency measured: still a few pages
    assert derived_gap(0.001, 1e6, 10) == MIN_GAP  # 100 B: a request is cheap, merge little
    assert derived_gap(0.080, 1e9, 1) == MAX_GAP  # 80 MB: never hold that many gap bytes
    assert (16 * KiB, 1024 * KiB) == (MIN_GAP, MAX_GAP)


@pytest.mark.parametrize("bad", [(0.02, 90e6, 0), (-0.001, 90e6, 10), (0.02, -1.0, 10)])
def test_impossible_inputs_are_refused(bad):
    with pytest.raises(ValueError, match="derived_gap"):
        derived_gap(*bad)


@given(
    st.floats(0, 1),
    st.floats(0, 1e10),
    st.integers(1, 1000),
    st.floats(1.0, 4.0),
)
def test_the_gap_never_shrinks_when_a_request_costs_more(latency, bandwidth, in_flight, more):
    g = derived_gap(latency, bandwidth, in_flight)
    assert MIN_GAP <= g <= MAX_GAP
    assert derived_gap(latency * more, bandwidth, in_flight) >= g
    assert derived_gap(latency, bandwidth * more, in_flight) >= g


# --- the estimator ----------------------------------------------------------------------


def test_before_any_measurement_the_priors_give_the_start_gap():
    e = Estimator().estimate()
    assert (e.latency, e.bandwidth, e.samples, e.bandwidth_samples) == (
        PRIOR_LATENCY,
        PRIOR_BANDWIDTH,
        0,
        0,
    )
    store = f"test {uuid.uuid4()}"
    assert gap.gap_for(store, BOTOCORE_POOL) == derived_gap(
        PRIOR_LATENCY, PRIOR_BANDWIDTH, BOTOCORE_POOL
    )
    assert gap.gap_for(store, BOTOCORE_POOL) == 200_000


def _warm() -> Estimator:
    est = Estimator()
    est.observe(1, 100, 1.0, 1)
    return est


def test_small_requests_measure_latency_and_large_ones_bandwidth():
    latency, bandwidth = 0.030, 40e6
    est = Estimator()
    est.observe(1, 4096, 0.5, 1)  # the first call sets the client up: not counted
    assert est.estimate().samples == 0
    # Point reads of 4 KB: time to first byte plus a tenth of a millisecond.
    for _ in range(30):
        est.observe(1, 4096, latency + 4096 / bandwidth, 1)
    e = est.estimate()
    assert e.latency == pytest.approx(latency, rel=0.01)
    assert e.bandwidth == PRIOR_BANDWIDTH and e.bandwidth_samples == 0
    # A stream's 8 MiB chunks: mostly transfer, which tells the bandwidth.
    for _ in range(30):
        est.observe(1, 8 << 20, latency + (8 << 20) / bandwidth, 1)
    e = est.estimate()
    assert e.bandwidth == pytest.approx(bandwidth, rel=0.01)
    assert e.latency == pytest.approx(latency, rel=0.01)
    assert (e.samples, e.bandwidth_samples) == (60, 30)


def test_a_call_of_many_requests_counts_the_time_of_one_in_flight():
    est = _warm()
    # 100 requests of 10 KB, 10 at a time, 10 waves of 25 ms: one request took 25 ms.
    est.observe(100, 100 * 10_000, 0.250, 10)
    assert est.estimate().latency == pytest.approx(0.025 - 10_000 / PRIOR_BANDWIDTH)
    # Fewer requests than may be in flight: all at once, each took the whole call.
    est = _warm()
    est.observe(4, 4 * 10_000, 0.025, 10)
    assert est.estimate().latency == pytest.approx(0.025 - 10_000 / PRIOR_BANDWIDTH)


def test_nothing_measured_changes_nothing():
    est = _warm()
    est.observe(0, 0, 1.0, 10)
    est.observe(1, 100, 0.0, 1)
    assert est.estimate().samples == 0


def test_stores_are_estimated_apart_and_a_slower_store_merges_wider_gaps():
    near, far = f"test near {uuid.uuid4()}", f"test far {uuid.uuid4()}"
    for _ in range(11):
        gap.observe(near, 1, 1000, 0.001, 1)
        gap.observe(far, 1, 1000, 0.080, 1)
    assert gap.estimate(near).latency == pytest.approx(0.001 - 1000 / PRIOR_BANDWIDTH)
    assert gap.estimate(far).latency == pytest.approx(0.080, rel=0.01)
    assert gap.gap_for(near, BOTOCORE_POOL) == MIN_GAP  # 1 ms x 100 MB/s / 10 = 10 KB
    assert gap.gap_for(far, BOTOCORE_POOL) == pytest.approx(800_000, rel=0.001)  # 80 ms x ...


def _child_estimate(key: str) -> int:
    return gap.estimate(key).samples


def test_a_forked_child_starts_afresh_even_while_a_parents_thread_measures():
    key = f"test fork {uuid.uuid4()}"
    for _ in range(3):
        gap.observe(key, 1, 1000, 0.01, 1)
    assert gap.estimate(key).samples == 2
    # Another thread of the parent in the middle of an update when the fork happens.
    estimator = gap._estimator(key)
    with gap._stores_lock, estimator._lock, multiprocessing.get_context("fork").Pool(1) as pool:
        samples = pool.apply_async(_child_estimate, (key,)).get(timeout=60)
    assert samples == 0


# --- the read budget --------------------------------------------------------------------


def _bytes_read(file, start, end, max_gap):
    merged = merge_sorted(file, start, end, np.full(int(file.max()) + 1, max_gap))
    return int((merged.end - merged.start).sum())


def test_the_budget_reads_the_smallest_gaps_up_to_the_wanted_bytes():
    # Four ranges of 100 bytes and an empty one; gaps of 10, 50, 350 and 40 bytes.
    file = np.zeros(5, dtype=np.int64)
    start = np.array([0, 110, 260, 710, 850])
    end = np.array([100, 210, 360, 810, 850])
    assert int((end - start).sum()) == 400
    # 10 + 40 + 50 = 100 fit in 0.75 x the 400 bytes wanted; with 350 they would not.
    assert budget_gap(file, start, end) == 349
    assert _bytes_read(file, start, end, 349) == 500


def test_gaps_of_one_size_fit_together_or_not_at_all():
    # Four 100-byte ranges, three 150-byte gaps: two would fit in 300 bytes, but a
    # threshold reads every gap of a size or none of them: none.
    start = np.array([0, 250, 500, 750])
    file, end = np.zeros(4, dtype=np.int64), start + 100
    assert budget_gap(file, start, end) == 149
    assert _bytes_read(file, start, end, 149) == 400


def test_gaps_between_files_and_overlaps_are_not_gaps():
    file = np.array([0, 0, 1, 1])
    start = np.array([0, 50, 10_000, 10_100])
    end = np.array([100, 120, 10_100, 10_150])  # 0's overlap; 1's touch
    assert budget_gap(file, start, end) == MAX_GAP  # nothing between them costs a byte
    assert budget_gap(file[:1], start[:1], end[:1]) == MAX_GAP


@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 100_000), st.integers(0, 5_000)),
        min_size=1,
        max_size=60,
    )
)
def test_merging_within_the_budget_never_reads_more_than_it_allows(rows):
    rows.sort()
    file = np.array([r[0] for r in rows], dtype=np.int64)
    start = np.array([r[1] for r in rows], dtype=np.int64)
    end = start + np.array([r[2] for r in rows], dtype=np.int64)
    cap = budget_gap(file, start, end)
    wanted = int((end - start).sum())
    assert _bytes_read(file, start, end, cap) <= (1 + READ_BUDGET) * wanted
    assert READ_BUDGET < 1  # under twice what is wanted


# --- the requests in flight ----------------------------------------------------------------


def test_requests_in_flight_come_from_the_setting_and_a_bad_value_names_the_variable():
    assert gap.requests_in_flight() == config.defaults()["remote_in_flight"] == 64
    with config.set(remote_in_flight="8"):
        assert gap.requests_in_flight() == 8
    for bad in ("0", "many", "-3", True):
        with (
            config.set(remote_in_flight=bad),
            pytest.raises(ValueError, match="SHARDCAT_REMOTE_IN_FLIGHT"),
        ):
            gap.requests_in_flight()


def test_a_streams_chunk_keeps_the_first_byte_wait_to_a_tenth_of_a_request():
    mib = 1024 * 1024
    # The priors (20 ms, 100 MB/s): 9 x L x B = 18 MB, held to the 16 MiB ceiling.
    assert gap.stream_chunk(f"test {uuid.uuid4()}") == gap.STREAM_CHUNK_MAX == 16 * mib
    near = f"test {uuid.uuid4()}"
    gap.observe(near, 1, 1000, 0.5, 1)  # the first call sets the client up: not counted
    gap.observe(near, 1, 1000, 0.001, 1)  # 1 ms to the first byte: 0.9 MB wanted
    assert gap.stream_chunk(near) == gap.STREAM_CHUNK_MIN == 8 * mib
    middle = f"test {uuid.uuid4()}"
    gap.observe(middle, 1, 1000, 0.5, 1)
    gap.observe(middle, 1, 1000, 0.011, 1)  # ~11 ms: 9.9 MB, rounded up to whole MiB
    chunk = gap.stream_chunk(middle)
    assert chunk % mib == 0 and 9 * mib < chunk <= 10 * mib
