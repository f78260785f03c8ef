"""Differential fuzzing of the compiled tar walk and sample grouping against their references.

Every case (``tests/fuzz/_tars.py``: generated tars with V7, ustar, GNU and
pax headers, long names, directories of every style, links, sparse and
unknown types, odd numbers and checksums; most then damaged: fields changed
with the checksum fixed again, headers copied, blocks inserted or deleted,
bytes flipped, cuts) is walked and scanned by both tar walkers, in small and
large chunks, with and without the file's size. ``_ctar.walk`` /
``walk_block`` and ``_ctar.Grouper`` must give the reference's members,
rows and samples, or the reference's error: the compiled side may reject
more than ``walk.py`` and ``scan.py`` (the C sources' rule), never accept
less, and here, as it stops in front of what it does not take, it is
expected to give exactly the reference's results.

Bounded for the test command; ``SHARDCAT_FUZZ_EXAMPLES`` raises the count
(and ``SHARDCAT_FUZZ_SEED`` changes the seed) for a long run, e.g. under
the sanitizers::

    SHARDCAT_FUZZ_EXAMPLES=120000 bash scripts/sanitize.sh tests/fuzz/test_fuzz_tar.py -s --timeout 0
"""

from __future__ import annotations

import collections
import os
import random
import time
from typing import Any

import pytest

from shardcat.format.tar import tarwalker

from ._tars import case, compare, outcome

ctar: Any = pytest.importorskip("shardcat.format.tar._ctar")

EXAMPLES = int(os.environ.get("SHARDCAT_FUZZ_EXAMPLES", "5000"))
SEED = int(os.environ.get("SHARDCAT_FUZZ_SEED", "20261125"))

pytestmark = pytest.mark.skipif(
    "compiled" not in tarwalker.available(), reason="the compiled tar walker is not built"
)


def test_the_compiled_walk_and_grouping_give_the_references_results():
    counts: collections.Counter[str] = collections.Counter()
    first: dict[str, str] = {}
    began = time.perf_counter()
    for n in range(EXAMPLES):
        data, options, damage = case(SEED, n)
        samples = n % 4 == 0  # iter_tar_samples too (its own draining of the grouper)
        compiled = outcome(data, "compiled", options, samples=samples)
        reference = outcome(data, "python", options, samples=samples)
        counts["cases"] += 1
        counts["rejected by the reference"] += hasattr(reference["scan"], "kind")
        hows = {compare(got, reference[part]) for part, got in compiled.items()} - {None}
        counts["mismatching cases"] += bool(hows)
        for part, got in compiled.items():
            how = compare(got, reference[part])
            if how is not None:
                counts[f"{part} {how}"] += 1
                first.setdefault(
                    how,
                    f"seed {SEED} case {n} ({part}; {options}; damage: {damage}):\n"
                    f"  compiled:  {str(got)[:400]}\n  reference: {str(reference[part])[:400]}",
                )
    seconds = time.perf_counter() - began
    print(f"tar fuzz: seed {SEED}, {dict(counts)}, {seconds:.1f} s")
    # Rejecting more would be allowed by the rule; it does not happen either (it stops instead).
    wrong = {how: first[how] for how in first}
    assert not wrong, "\n".join(wrong.values())


def test_the_compiled_walk_stays_inside_its_buffer_wherever_it_starts():
    """Any start, end, base, expected size and global path: members inside buf[start:end]."""
    rng = random.Random(f"walk-bounds:{SEED}")
    for n in range(max(200, EXAMPLES // 10)):
        data, _, _ = case(SEED + 1, n)
        buf = bytearray(data)
        start = rng.randrange(len(buf) + 1)
        end = rng.randrange(start, len(buf) + 1)
        base = rng.choice([0, start, 1 << 40])
        expected = rng.choice([-1, len(buf), rng.randrange(len(buf) + 1)])
        glob = rng.choice([None, b"", b"g/x.jpg"])
        stop, members, skipped, _, names, firsts, payloads, sizes, _ = ctar.walk(
            buf, start, end, base, expected, glob
        )
        assert start <= stop <= end
        assert members >= len(names) and skipped <= members
        for first, payload, size in zip(firsts, payloads, sizes):
            assert base + start <= first <= payload - 512
            assert payload + size <= base + end
        stop2, members2, _, _, block = ctar.walk_block(buf, start, end, base, expected, glob)
        assert (stop2, members2) == (stop, members)
        if block is not None:
            assert block.columns()[0] == names
            grouper = ctar.Grouper()
            at = 0
            while at < len(block):
                at, rejected = grouper.feed(block, at)
                if at < len(block):
                    if rejected is not None:
                        break
                    at += 1  # a name scan.py splits: skip it here
            grouper.finish()
            grouper.take()
