"""Choosing the compiled module or the Python reference (SHARDCAT_RECORD_CODEC, SHARDCAT_TAR_WALKER)."""

from __future__ import annotations

import pytest

from shardcat.errors import CodecUnavailableError
from shardcat.format import recordcodec
from shardcat.format.implementations import choose
from shardcat.format.tar import tarwalker


def test_auto_takes_the_compiled_module_only_where_it_was_built():
    args = {"missing": None, "what": "x", "env_var": "X"}
    assert choose(" AUTO ", built=True, **args) == "compiled"
    assert choose("auto", built=False, **args) == "python"
    assert choose("Python", built=True, **args) == "python"


def test_a_missing_extension_and_an_unknown_name_are_refused_saying_what_to_set():
    why = ImportError("no _ccodec")
    with pytest.raises(
        CodecUnavailableError, match=r"record codec was not built \(no _ccodec\).*X=python"
    ):
        choose("compiled", built=False, missing=why, what="record codec", env_var="X")
    with pytest.raises(ValueError, match="X='fast': choose auto, compiled or python"):
        choose("fast", built=True, missing=None, what="record codec", env_var="X")


@pytest.mark.parametrize("module", [recordcodec, tarwalker])
def test_use_switches_and_returns_the_previous_choice(module):
    before = module.active()
    try:
        assert module.use("python") == before
        assert module.active() == "python"
        with pytest.raises(ValueError, match="choose auto, compiled or python"):
            module.use("fast")
        assert module.active() == "python"  # a refused name changes nothing
    finally:
        module.use(before)
