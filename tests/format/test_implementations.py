"""Choosing the compiled module or the Python reference (SHARDCAT_RECORD_CODEC, SHARDCAT_TAR_WALKER)."""

from __future__ import annotations

import pytest

from shardcat.errors import CodecUnavailableError
from shardcat.format import implementations, recordcodec, records, runs
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


def test_one_registry_holds_every_accelerated_component():
    import shardcat.reading.point  # noqa: F401 - registers the point lookup

    assert {"record codec", "tar walker", "point lookup"} <= set(implementations.components())
    assert implementations.active("record codec") == recordcodec.active()


def test_a_switch_rebinds_each_function_once_to_the_chosen_side():
    before = recordcodec.active()
    try:
        recordcodec.use("python")
        # The Python side: the reference, or a twin with the compiled function's arguments.
        assert recordcodec.decode_record is records.decode_record
        assert recordcodec.iter_records is runs.iter_records
        assert recordcodec.add_plain is records.add_plain
        if "compiled" in recordcodec.available():
            recordcodec.use("compiled")
            from shardcat.format import _ccodec

            assert recordcodec.decode_record is _ccodec.decode_record
            assert recordcodec.iter_records is _ccodec.iter_records
            assert recordcodec.tar_record is _ccodec.tar_record
    finally:
        recordcodec.use(before)
