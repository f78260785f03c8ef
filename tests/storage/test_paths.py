"""Local URLs and paths: one rule for turning ``file://`` URLs into filesystem paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardcat.storage import is_local, local_path


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("/data/train-000000.shard", "/data/train-000000.shard"),
        ("relative/x.shard", "relative/x.shard"),
        ("file:///data/x.shard", "/data/x.shard"),
        ("local:///data/x.shard", "/data/x.shard"),
        (Path("/data/x.shard"), "/data/x.shard"),
    ],
)
def test_local_path_of_a_local_url(url, path):
    assert is_local(str(url))
    assert local_path(url) == path


def test_a_shard_written_to_a_file_url_lands_at_its_path(tmp_path):
    import shardcat

    with shardcat.ShardWriter(f"file://{tmp_path}/x.shard") as w:
        w.add("k", {"txt": "one"})
    assert (tmp_path / "x.shard").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.shard"]  # no .partial left
    with shardcat.ShardReader(str(tmp_path / "x.shard")) as r:
        assert r.get("k")["txt"].decode() == "one"
