"""Records are read-only mappings of entry names to entries; .npy entries decode writable on request."""

from __future__ import annotations

import io
from collections.abc import Mapping

import numpy as np
import pytest

from shardcat.errors import EntryNotFoundError
from shardcat.format import Codec, Entry, Record, ShardReader, ShardWriter

from .conftest import write_shard

ARRAY = np.arange(12, dtype="<f4").reshape(3, 4)
FORTRAN = np.asfortranarray(np.arange(6, dtype="<i8").reshape(2, 3))


@pytest.fixture(params=["none", "zstd"])
def record(request: pytest.FixtureRequest) -> Record:
    # Arrays big enough that zstd compresses them: both the zero-copy and the decompressed path.
    samples = [
        {
            "__key__": "cat/1",
            "jpg": b"\xff\xd8" + bytes(300),
            "json": {"label": 3},
            "npy": np.zeros((64, 64), dtype="<f4") + ARRAY[0, 1],
            "f.npy": FORTRAN,
            "txt": "meow",
        }
    ]
    data = write_shard(samples, compression=request.param)
    rec = ShardReader(data).get("cat/1")
    assert (rec["npy"].codec is Codec.ZSTD) == (request.param == "zstd")
    return rec


def test_a_record_is_a_mapping_of_its_entries(record: Record) -> None:
    assert isinstance(record, Mapping)
    names = ["jpg", "json", "npy", "f.npy", "txt"]
    assert list(record) == names  # iteration yields entry names, in write order (as before)
    as_dict = dict(record)  # raised "dictionary update sequence element #0 has length 3"
    assert list(as_dict) == names
    assert all(isinstance(e, Entry) for e in as_dict.values())
    assert as_dict["json"] is record["json"]
    assert list(record.keys()) == names
    assert [n for n, _ in record.items()] == names
    assert list(record.values()) == [record[n] for n in names]
    assert record.get("txt") is record["txt"]
    assert record.get("missing") is None
    assert record.get("missing", "fallback") == "fallback"
    assert "__key__" not in record and record.key == "cat/1"  # the key is not an entry
    with pytest.raises(KeyError):
        record["missing"]
    assert {**record}.keys() == as_dict.keys()


@pytest.mark.parametrize("how", ["lazy", "built", "plain"])
def test_a_missing_entry_is_a_key_error_that_names_the_record_and_its_entries(
    record: Record, how: str
) -> None:
    names = ["jpg", "json", "npy", "f.npy", "txt"]
    if how == "built":
        record.entries  # noqa: B018 (every entry made: the dict path)
    elif how == "plain":
        record = Record(record.key, dict(record.entries))
    with pytest.raises(EntryNotFoundError) as err:
        record["jpeg"]
    assert isinstance(err.value, KeyError) and err.value.args == ("jpeg",)
    assert err.value.key == "cat/1" and list(err.value.names) == names
    assert str(err.value) == f"record 'cat/1' has no entry 'jpeg'; its entries are {names}"
    assert record.get("jpeg") is None and record.get("jpg") is record["jpg"]
    assert "jpeg" not in record


def test_records_compare_by_key_and_entries_not_with_dicts(record: Record) -> None:
    same = Record(record.key, dict(record.entries))
    other_key = Record("cat/2", dict(record.entries))
    assert record == same
    assert record != other_key
    assert record != dict(record)  # a dict has no key
    with pytest.raises(TypeError):
        hash(record)


def test_a_record_read_back_can_be_written_again(record: Record) -> None:
    buf = io.BytesIO()
    with ShardWriter(buf) as w:
        w.write(record)  # the key comes from record.key
        w.add("copy/1", record)
    reader = ShardReader(buf.getvalue())
    assert [r.key for r in reader] == ["cat/1", "copy/1"]
    for rec in reader:
        assert {n: e.data for n, e in rec.items()} == {n: e.data for n, e in record.items()}


def test_npy_entries_are_read_only_views_by_default(record: Record) -> None:
    array = record["npy"].decode()
    assert not array.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        array[0, 0] = 1.0


@pytest.mark.parametrize("name", ["npy", "f.npy"])
def test_writable_decode_gives_an_independent_writable_copy(record: Record, name: str) -> None:
    view = record[name].decode()
    copy = record[name].decode(writable=True)
    assert copy.flags.writeable and copy.flags.owndata
    assert copy.dtype == view.dtype and copy.shape == view.shape
    assert copy.flags.f_contiguous == view.flags.f_contiguous  # memory order kept
    np.testing.assert_array_equal(copy, view)
    copy[0, 0] = 99
    assert view[0, 0] != 99  # the shard's bytes are untouched
    assert record[name].decode()[0, 0] != 99


def test_writable_applies_to_every_array_of_a_decoded_record(record: Record) -> None:
    sample = record.decode(writable=True)
    assert sample["__key__"] == "cat/1"
    assert sample["npy"].flags.writeable and sample["f.npy"].flags.writeable
    assert sample["json"] == {"label": 3} and sample["txt"] == "meow"
    assert not record.decode()["npy"].flags.writeable


def test_entry_data_is_a_new_bytes_copy_of_the_view_with_either_codec(record: Record) -> None:
    # Entry.data: bytes equal to the view, never the shard's buffer itself.
    for name in record:
        entry = record[name]
        data = entry.data
        assert type(data) is bytes and data == bytes(entry.view) and len(data) == len(entry)
    stored = Entry.from_stored(memoryview(b"payload"), "text/plain", Codec.NONE)
    assert stored.data == b"payload" and stored.data is not stored.data
    released = memoryview(b"gone")
    gone = Entry.from_stored(released, "text/plain", Codec.NONE)
    released.release()
    with pytest.raises(ValueError, match="released"):
        _ = gone.data


def test_stored_entry_data_is_compiled_where_the_codec_is() -> None:
    # Once per entry a batch hands out as bytes: a C getter, no Python frames.
    from shardcat.format import recordcodec
    from shardcat.format.entries import _StoredEntry

    if "compiled" not in recordcodec.available():
        pytest.skip("the compiled record codec is not built")
    fget = _StoredEntry.__dict__["data"].fget
    assert type(fget).__name__ == "builtin_function_or_method"


@pytest.mark.parametrize("built", [False, True])
def test_a_merged_record_of_groups_reads_each_name_from_its_newest_part(built: bool) -> None:
    """merge_records (column groups): the base's names first, a later group's replacing in place."""
    from shardcat.format.entries import as_entries
    from shardcat.format.merged import MergedRecord, merge_records

    data = write_shard([{"__key__": "k", "jpg": b"img", "txt": "base", "cls": "1"}])
    base = ShardReader(data).get("k")
    cap = ShardReader(write_shard([{"__key__": "k", "cap": "a cat", "txt": "fixed"}])).get("k")
    plain = Record("k", as_entries({"depth.npy": ARRAY}))  # a Record of any kind
    merged = merge_records("k", [base, cap, plain])
    assert isinstance(merged, MergedRecord)
    if built:
        assert list(merged.entries) == ["jpg", "txt", "cls", "cap", "depth.npy"]
    assert list(merged) == ["jpg", "txt", "cls", "cap", "depth.npy"] and len(merged) == 5
    assert merged["txt"] is cap["txt"] and merged["jpg"] is base["jpg"]
    assert "cap" in merged and "missing" not in merged and "__key__" not in merged
    assert merged.key == "k" and (merged.offset, merged.length) == (base.offset, base.length)
    assert [n for n, _ in merged.items()] == list(merged)
    assert list(merged.values()) == [merged[n] for n in merged]
    decoded = merged.decode()
    assert decoded["txt"] == "fixed" and decoded["cap"] == "a cat" and decoded["__key__"] == "k"
    assert np.array_equal(decoded["depth.npy"], ARRAY)
    as_record = Record("k", {n: merged[n] for n in merged})
    assert merged == as_record and as_record == merged
    with pytest.raises(EntryNotFoundError, match="cap"):
        merged["missing"]
    # Records of the same layouts share the merge of their names (one rule, made once).
    again = merge_records("k", [base, cap, plain])
    assert list(again) == list(merged) and again["txt"] is cap["txt"]


def test_bytes_of_an_entry_are_its_decoded_bytes(record: Record) -> None:
    # Bags read with decode=False hold entries; bytes(entry) is what a user writes first.
    assert bytes(record["jpg"]) == record["jpg"].data == b"\xff\xd8" + bytes(300)
    assert bytes(record["txt"]) == b"meow"
    assert bytes(Entry(b"abc", "text/plain")) == b"abc"
