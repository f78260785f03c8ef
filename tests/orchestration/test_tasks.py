"""The partition task on its own (no Dask): what it refuses before anything is staged."""

from __future__ import annotations

import pytest

from shardcat.errors import InvalidKeyError
from shardcat.orchestration.plan import WritePlan
from shardcat.orchestration.tasks import write_partition
from shardcat.reading import Catalog


def test_a_task_refuses_samples_without_a_key_or_not_dicts(tmp_path, sqlite_url):
    with Catalog(sqlite_url) as cat:
        cat.create_dataset("d", str(tmp_path / "d"))
        job = cat.begin_job("d")
        plan = WritePlan(
            dataset="d", root=str(tmp_path / "d"), prefix="d", job_id=job.id, catalog=cat.handle()
        )
        with pytest.raises(
            InvalidKeyError, match=r"^sample has no '__key__'; its names are \['txt'\]$"
        ):
            write_partition([{"__key__": "a", "txt": "x"}, {"txt": "y"}], plan, 0)
        with pytest.raises(TypeError, match="samples are dicts"):
            write_partition([["not", "a", "dict"]], plan, 1)
        # The shard being written was dropped: nothing staged, no file left.
        assert cat.shards("d", state=None) == []
        assert list((tmp_path / "d").glob("*")) == []
        ok = write_partition([{"__key__": "a", "txt": "x"}], plan, 2)
        assert (ok.records, len(ok.shards)) == (1, 1)
        assert [s.url for s in cat.shards("d", state="staged")] == list(ok.shards)
