"""Every SQL example in docs/CATALOG.md §12 runs on SQLite and PostgreSQL, and says what it claims.

The dataset has history, as a user's has after a week: a key replaced, a key
deleted, a dataset overwritten, an aborted job. The examples that ignored
versions returned the deleted key, both records of the replaced one and the
bytes of the overwritten shards; through the views they answer for the
version they name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from shardcat.reading import Catalog

from .helpers import write_shard

DOC = Path(__file__).resolve().parents[2] / "docs" / "CATALOG.md"


def _examples() -> list[str]:
    text = DOC.read_text()
    section = text[text.index("## 12. Example SQL queries") : text.index("## 13.")]
    return re.findall(r"```sql\n(.*?)```", section, flags=re.S)


def _sample(key: str) -> dict[str, Any]:
    return (
        {"jpg": b"\xff\xd8" + key.encode(), "json": {"k": key}}
        if key.startswith("cam3/")
        else {"json": {"k": key}}
    )


def history(cat: Catalog, root: str) -> dict[str, Any]:
    """``train``: v1 (tagged ``first``) a.shard; v2 b.shard; v3 c.shard replaces img/00000007;
    v4 deletes cam3/002; an aborted job's d.shard. ``val``: v1 v0.shard, v2 overwritten by v1.shard.
    """
    cat.create_dataset("train", root)
    url = {name: f"{root}/{name}.shard" for name in ("a", "b", "c", "d", "v0", "v1")}
    first = ["cam3/001", "cam3/002", "CAM3/003", "img/00000007"]
    cat.register_shard("train", write_shard(url["a"], first, shard_number=0, make=_sample))
    cat.tag("train", 1, "first")
    second = cat.begin_job("train", description="second")
    info = write_shard(url["b"], ["cam30/1", "img/00000008"], shard_number=1, make=_sample)
    cat.register_shard("train", info, job=second)
    cat.commit_job(second)
    replacing = cat.begin_job("train", description="replace one")
    info = write_shard(url["c"], ["img/00000007"], shard_number=2, make=lambda k: {"json": {}})
    cat.register_shard("train", info, job=replacing)
    cat.commit_job(replacing, on_duplicate="replace")
    cat.delete_keys("train", ["cam3/002"], message="bad label")
    aborted = cat.begin_job("train")
    cat.register_shard("train", write_shard(url["d"], ["zzz"], make=_sample), job=aborted)
    cat.abort_job(aborted)

    cat.create_dataset("val", root)
    cat.register_shard("val", write_shard(url["v0"], ["x1", "x2"], make=_sample))
    over = cat.begin_job("val")
    cat.register_shard("val", write_shard(url["v1"], ["x1"], make=_sample), job=over)
    cat.commit_job(over, replace=True)
    return {"url": url, "second_job": second.id}


def test_every_example_runs_and_answers(cat, local_root):
    examples = _examples()
    assert len(examples) == 14
    made = history(cat, local_root)
    url = made["url"]
    size = {row.url: row.size_bytes for row in cat.shards("train") + cat.shards("val")}
    live = {"train": list(cat.keys("train")), "val": list(cat.keys("val"))}
    assert sorted(live["train"]) == sorted(
        ["cam3/001", "CAM3/003", "cam30/1", "img/00000007", "img/00000008"]
    )
    results = []
    with cat.engine.connect() as conn:
        for sql in examples:
            sql = sql.replace("job_id = 17", f"job_id = {made['second_job']}")
            results.append(conn.execute(sa.text(sql)).all())
    (
        per_shard,
        cam3,
        totals,
        jpg,
        per_entry,
        where,
        tagged,
        gone,
        files,
        old_format,
        log,
        by_job,
        leftovers,
        group_parts,
    ) = results
    # No column groups in this history: every live record is a base record.
    assert [(r.part, r.records) for r in group_parts] == [("(base)", 5)]

    assert [tuple(r) for r in per_shard] == [
        (0, url["a"], 2, 4, size[url["a"]]),  # cam3/002 deleted, img/00000007 replaced
        (1, url["b"], 2, 2, size[url["b"]]),
        (2, url["c"], 1, 1, size[url["c"]]),
    ]
    assert [r.key for r in cam3] == ["cam3/001"]  # not deleted cam3/002, CAM3/, cam30/
    sample_bytes = {
        name: sum(cat.locate(name, k).length for k in keys) for name, keys in live.items()
    }
    assert [tuple(r) for r in totals] == [
        ("train", 3, 5, sum(size[url[n]] for n in "abc"), sample_bytes["train"]),
        ("val", 1, 1, size[url["v1"]], sample_bytes["val"]),  # not the overwritten v0.shard
    ]
    assert [r.key for r in jpg] == ["cam3/001"]
    assert {(r.name, r.samples) for r in per_entry} == {("json", 5), ("jpg", 1)}
    now = cat.locate("train", "img/00000007")
    assert [tuple(r) for r in where] == [(url["c"], now.offset, now.length)]  # one record
    assert sorted(r.key for r in tagged) == sorted(
        ["cam3/001", "cam3/002", "CAM3/003", "img/00000007"]
    )
    assert {r.shard_url for r in tagged} == {url["a"]}
    assert [r.key for r in gone] == ["cam3/002"]
    assert [(r.version, r.url) for r in files] == [
        (1, url["a"]),
        *[(2, url[n]) for n in "ab"],
        *[(3, url[n]) for n in "abc"],
        *[(4, url[n]) for n in "abc"],
    ]
    assert old_format == []
    assert [(r.version, r.total_records) for r in log] == [(1, 4), (2, 6), (3, 6), (4, 5)]
    assert (log[2].records_added, log[2].records_removed) == (1, 1)
    assert (log[3].operation, log[3].records_removed, log[3].message) == ("delete", 1, "bad label")
    assert [r.url for r in by_job] == [url["b"]]
    assert [(r.url, r.state) for r in leftovers] == [(url["d"], "deleted")]
