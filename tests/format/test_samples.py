"""Sample dicts: one ``__key__`` rule for every writer, and entries built from stored bytes."""

from __future__ import annotations

import io

import pytest

import shardcat
from shardcat.errors import FormatError, InvalidKeyError
from shardcat.format import Codec, Entry, ShardWriter
from shardcat.format.codecs import compress
from shardcat.format.entries import KEY, sample_key
from shardcat.orchestration.samples import as_sample


def test_sample_key_returns_the_key_or_names_what_the_sample_has():
    assert sample_key({KEY: "img/1", "jpg": b"x"}) == "img/1"
    with pytest.raises(
        InvalidKeyError, match=r"^sample has no '__key__'; its names are \['jpg', 'txt'\]$"
    ):
        sample_key({"txt": "a", "jpg": b"x"})
    with pytest.raises(InvalidKeyError, match=r"^a\.shard: sample has no '__key__'"):
        sample_key({"jpg": b"x"}, path="a.shard")


def test_every_writer_applies_the_same_rule(tmp_path):
    with ShardWriter(io.BytesIO(), path="mem.shard") as w:
        w.write({KEY: "k/1", "txt": "one"})
        with pytest.raises(InvalidKeyError, match=r"^mem\.shard: sample has no '__key__'"):
            w.write({"txt": "two"})
    assert w.info.record_count == 1
    with shardcat.RollingShardWriter(str(tmp_path)) as rolling:
        rolling.write({KEY: "k/1", "txt": "one"})
        with pytest.raises(
            InvalidKeyError, match=r"^sample has no '__key__'; its names are \['txt'\]"
        ):
            rolling.write({"txt": "two"})
    assert [info.record_count for info in rolling.shards] == [1]
    with pytest.raises(TypeError, match="samples are dicts"):
        as_sample(["k/1", b"x"])


def test_an_entry_from_stored_bytes_is_a_view_or_decompresses_on_demand():
    stored = memoryview(b"hello, stored bytes")
    plain = Entry.from_stored(stored, "text/plain", Codec.NONE)
    assert plain.view.obj is stored.obj and plain.data == b"hello, stored bytes"
    text = ("compressible " * 100).encode()
    packed = Entry.from_stored(memoryview(compress(text, Codec.ZSTD)), "text/plain", Codec.ZSTD)
    assert packed.codec is Codec.ZSTD and packed.data == text
    broken = Entry.from_stored(
        memoryview(b"not zstd at all"),
        "text/plain",
        Codec.ZSTD,
        name="txt",
        path="a.shard",
        offset=64,
    )
    with pytest.raises(FormatError, match=r"a\.shard") as err:
        _ = broken.data
    assert err.value.offset == 64
