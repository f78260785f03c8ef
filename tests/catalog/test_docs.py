"""Every SQL example in docs/CATALOG.md §12 runs on SQLite and PostgreSQL, and says what it claims."""

from __future__ import annotations

import re
from pathlib import Path

import sqlalchemy as sa

from .helpers import write_shard

DOC = Path(__file__).resolve().parents[2] / "docs" / "CATALOG.md"


def _examples() -> list[str]:
    text = DOC.read_text()
    section = text[text.index("## 12. Example SQL queries") : text.index("## 13.")]
    return re.findall(r"```sql\n(.*?)```", section, flags=re.S)


def _sample(key):
    return (
        {"jpg": b"\xff\xd8" + key.encode(), "json": {"k": key}}
        if key.startswith("cam3/")
        else {"json": {"k": key}}
    )


def test_every_example_runs_and_answers(cat, local_root):
    examples = _examples()
    assert len(examples) >= 9
    cat.create_dataset("train", local_root)
    keys0 = ["cam3/001", "cam3/002", "CAM3/003", "img/00000007"]
    keys1 = ["cam30/1", "img/00000008"]
    cat.register_shard(
        "train", write_shard(f"{local_root}/a.shard", keys0, shard_number=0, make=_sample)
    )
    job = cat.begin_job("train", description="second")
    cat.register_shard(
        "train", write_shard(f"{local_root}/b.shard", keys1, shard_number=1, make=_sample), job=job
    )
    cat.commit_job(job)
    aborted = cat.begin_job("train")
    cat.register_shard(
        "train", write_shard(f"{local_root}/c.shard", ["zzz"], make=_sample), job=aborted
    )
    cat.abort_job(aborted)
    results = []
    with cat.engine.connect() as conn:
        for sql in examples:
            results.append(
                conn.execute(sa.text(sql.replace("job_id = 17", f"job_id = {job.id}"))).all()
            )
    per_shard, cam3, totals, by_job, jpg, per_entry, where, history, leftovers, old_format = (
        results[:10]
    )
    assert [(r.shard_number, r.record_count) for r in per_shard] == [(0, 4), (1, 2)]
    assert [r.key for r in cam3] == ["cam3/001", "cam3/002"]  # not CAM3/, not cam30/
    assert [(r.name, r.shards, r.samples) for r in totals] == [("train", 2, 6)]
    assert [r.url for r in by_job] == [f"{local_root}/b.shard"]
    assert [r.key for r in jpg] == ["cam3/001", "cam3/002"]
    assert {(r.name, r.samples) for r in per_entry} == {("json", 6), ("jpg", 2)}
    assert [(r.url, r.byte_offset) for r in where] == [
        (f"{local_root}/a.shard", cat.locate("train", "img/00000007").offset)
    ]
    assert [r.description for r in history] == ["register_shard", "second"]
    assert [(r.url, r.state) for r in leftovers] == [(f"{local_root}/c.shard", "deleted")]
    assert old_format == []
