"""The one private use of torch's internals (shardcat/torch/_pipe.py) still works on this torch.

Widening the pipe DataLoader workers send batches through is best effort at
run time: where torch's private attributes moved it silently does nothing.
This test is where that change is noticed: it fails, naming the torch
release, when the installed torch no longer has them, or when the range
_pipe.py declares drifts from pyproject's torch extra.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
tomllib = pytest.importorskip("tomllib")  # Python 3.11+

from torch.utils.data import DataLoader, IterableDataset  # noqa: E402

from shardcat.torch import _pipe  # noqa: E402

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"


class _Numbers(IterableDataset):
    def __iter__(self):
        return iter(range(8))


def test_the_declared_range_is_the_torch_extras():
    extra = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]["torch"]
    (spec,) = extra
    low = re.fullmatch(r"torch>=(\d+)\.(\d+)(?:,<(\d+)\.(\d+))?", spec)
    assert low, f"pyproject's torch extra {spec!r}: update _pipe.TORCH_RANGE with it"
    high = (int(low[3]), int(low[4])) if low[3] else None
    assert ((int(low[1]), int(low[2])), high) == _pipe.TORCH_RANGE
    assert _pipe.torch_in_range("2.2.0") and _pipe.torch_in_range("2.13.0+cpu")
    assert not _pipe.torch_in_range("2.1.2") and not _pipe.torch_in_range("nightly")


def test_this_torch_still_has_the_private_pipe():
    assert _pipe.torch_in_range(), f"torch {torch.__version__} is outside _pipe.TORCH_RANGE"
    loader = DataLoader(_Numbers(), batch_size=None, num_workers=1)
    it = iter(loader)
    try:
        try:
            pipe = _pipe.result_pipe(it)
        except AttributeError as e:
            pytest.fail(
                f"torch {torch.__version__} moved DataLoader's private result queue "
                f"(_worker_result_queue._reader): update shardcat/torch/_pipe.py ({e})"
            )
        assert isinstance(pipe.fileno(), int)
        fcntl = pytest.importorskip("fcntl")
        if hasattr(fcntl, "F_GETPIPE_SZ"):
            assert _pipe.widen_result_pipe(it) == _pipe.RESULT_PIPE_BYTES
            assert fcntl.fcntl(pipe.fileno(), fcntl.F_GETPIPE_SZ) == _pipe.RESULT_PIPE_BYTES
        assert sorted(int(x) for x in it) == list(range(8))
    finally:
        it._shutdown_workers()


def test_without_the_private_pipe_the_iterator_reads_as_it_would():
    # A single-process iterator has no worker result queue: exactly what an iterator of a torch
    # whose internals moved looks like to _pipe. Nothing is widened, and the batches still come.
    it = iter(DataLoader(_Numbers(), batch_size=None, num_workers=0))
    with pytest.raises(AttributeError):
        _pipe.result_pipe(it)
    assert _pipe.widen_result_pipe(it) is None
    assert [int(x) for x in it] == list(range(8))
