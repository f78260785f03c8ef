"""RollingShardWriter.mark_last: exactly the shard that takes the last record says so."""

from __future__ import annotations

import pytest

from shardcat.errors import WriterClosedError
from shardcat.storage.shards import RollingShardWriter, ShardReader


@pytest.mark.parametrize("count", [1, 9, 10, 11, 30])
def test_only_the_shard_with_the_last_record_carries_the_mark(tmp_path, count):
    # max_records=10: 10 and 30 records end exactly at a rollover (the last shard is full).
    with RollingShardWriter(str(tmp_path), max_records=10, metadata={"run": "a"}) as w:
        for i in range(count):
            if i == count - 1:
                w.mark_last({"last": w.closed_shards + 1})
            w.add(f"k{i:03d}", {"txt": "x"})
    shards = w.shards
    assert len(shards) == (count + 9) // 10
    metas = [ShardReader(s.path).info.metadata["user"] for s in shards]
    assert [m.get("last") for m in metas] == [None] * (len(shards) - 1) + [len(shards)]
    assert all(m["run"] == "a" for m in metas)


def test_metadata_cannot_change_after_close_and_must_be_json(tmp_path):
    from shardcat.storage.shards import ShardWriter

    w = ShardWriter(str(tmp_path / "a.shard"))
    with pytest.raises(TypeError, match="JSON-serialisable"):
        w.update_metadata({"bad": object()})
    w.update_metadata({"ok": (1, 2)})
    info = w.close()
    assert info.metadata["user"]["ok"] == [1, 2]
    with pytest.raises(WriterClosedError):
        w.update_metadata({"late": 1})
