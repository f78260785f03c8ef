"""verify as a Dask job: the same report as Catalog.verify, each task reading only its shards' rows."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from typer.testing import CliRunner

import shardcat
from shardcat.catalog.results import CatalogReport
from shardcat.cli.app import app
from shardcat.orchestration.verify import verify
from shardcat.reading import Catalog
from shardcat.reading.catalog import shards_to_verify, verify_shards

SHARDS = 6
KEYS = 30
PAYLOAD = 400  # bytes of each sample's one entry: a flipped byte lands in a payload


def _keys(i: int) -> list[str]:
    return [f"img/{i:02d}/{j:03d}" for j in range(KEYS)]


def _payload(key: str) -> bytes:
    return (key.encode() * PAYLOAD)[:PAYLOAD]


def _dataset(cat: Catalog, root: Path) -> list[str]:
    """``SHARDS`` committed shards of ``KEYS`` samples each; their paths, in shard order."""
    cat.create_dataset("train", str(root))
    paths = []
    for i in range(SHARDS):
        with shardcat.ShardWriter(str(root / f"train-{i:06d}.shard"), shard_number=i) as w:
            for k in _keys(i):
                w.add(k, {"bin": _payload(k)})
        info = w.close()
        cat.register_shard("train", info)
        paths.append(str(info.path))
    return paths


def _flip_payload(path: str, key: str) -> None:
    data = Path(path).read_bytes()
    at = data.index(_payload(key)) + PAYLOAD // 2
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(bytes([data[at] ^ 0x40]))


def _delete_rows(cat: Catalog, path: str, key: str) -> None:
    with cat.engine.begin() as conn:
        shard = conn.execute(
            sa.text("SELECT id FROM shards WHERE url = :u"), {"u": path}
        ).scalar_one()
        conn.execute(
            sa.text("DELETE FROM records WHERE shard_id = :s AND key = :k"), {"s": shard, "k": key}
        )


def _damage(cat: Catalog, paths: list[str]) -> None:
    """Shard 0 stays healthy; 1: a payload byte flipped, 2: truncated, 3: removed, 4: a row lost."""
    _flip_payload(paths[1], _keys(1)[7])
    with open(paths[2], "r+b") as f:
        f.truncate(os.path.getsize(paths[2]) // 2)
    os.remove(paths[3])
    _delete_rows(cat, paths[4], _keys(4)[3])


def _same(job: CatalogReport, client_side: CatalogReport) -> None:
    assert job.problems == client_side.problems
    assert (job.shards_checked, job.records_checked, job.bytes_checked) == (
        client_side.shards_checked,
        client_side.records_checked,
        client_side.bytes_checked,
    )


def test_a_healthy_dataset(client, catalog_url, tmp_path):
    with Catalog(catalog_url) as cat:
        _dataset(cat, tmp_path)
        report = verify(cat, "train", client=client, shards_per_task=2)
        assert report.ok, report
        assert report.shards_checked == SHARDS
        assert report.records_checked == SHARDS * KEYS
        _same(report, cat.verify("train"))
        # Each shard was committed as a version: an older one reads fewer shards.
        older = verify(cat, "train", client=client, version=3)
        _same(older, cat.verify("train", version=3))
        assert 0 < older.shards_checked < SHARDS


def test_each_damage_is_reported_as_catalog_verify_reports_it(client, catalog_url, tmp_path):
    with Catalog(catalog_url) as cat:
        paths = _dataset(cat, tmp_path)
        _damage(cat, paths)
        expected = cat.verify("train")
        report = verify(cat, "train", client=client, shards_per_task=2)
    _same(report, expected)
    kinds = {url: [p.kind for p in found] for url, found in report.by_shard().items()}
    assert paths[0] not in kinds
    assert kinds[paths[1]] == ["corrupt"]
    assert "CRC32C mismatch" in report.by_shard()[paths[1]][0].message
    assert kinds[paths[2]] == ["unreadable"]  # truncated: no trailer at its end
    assert "no trailer" in report.by_shard()[paths[2]][0].message
    assert kinds[paths[3]] == ["missing"]
    assert [(p.kind, p.keys) for p in report.by_shard()[paths[4]]] == [
        ("record-not-in-catalog", (_keys(4)[3],))
    ]
    assert paths[5] not in kinds


def _statements(cat: Catalog) -> tuple[list[tuple[str, Any]], Any]:
    seen: list[tuple[str, Any]] = []

    def note(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: Any) -> None:
        seen.append((statement, params))

    event.listen(cat.engine, "before_cursor_execute", note)
    return seen, note


def test_the_client_never_reads_a_record_row(client, catalog_url, tmp_path):
    with Catalog(catalog_url) as cat:
        _dataset(cat, tmp_path)
        seen, note = _statements(cat)
        # history=False: the manifests' check (the client's, in both) reads shard rows only.
        try:
            assert verify(cat, "train", client=client, history=False).ok
            job = [s for s, _ in seen if "from records" in s.lower()]
            seen.clear()
            assert cat.verify("train", history=False).ok
            client_side = [s for s, _ in seen if "from records" in s.lower()]
        finally:
            event.remove(cat.engine, "before_cursor_execute", note)
    # The client's own verify reads every shard's rows; the job's client reads none.
    assert len(client_side) >= SHARDS
    assert job == []


def test_a_task_reads_only_its_own_shards_rows(catalog_url, tmp_path):
    with Catalog(catalog_url) as cat:
        _dataset(cat, tmp_path)
        ids = shards_to_verify(cat, "train")
        mine = ids[2:4]
        seen, note = _statements(cat)
        try:
            verdicts = verify_shards(cat, mine)
        finally:
            event.remove(cat.engine, "before_cursor_execute", note)
    assert [(found, checked) for found, checked, _ in verdicts] == [([], KEYS), ([], KEYS)]
    reads = [params for statement, params in seen if "from records" in statement.lower()]
    # One query per shard, each for that shard's rows alone.
    assert len(reads) == len(mine)
    # PostgreSQL's driver takes named parameters, SQLite's positional ones.
    shards = [p["shard"] if isinstance(p, dict) else p[0] for p in reads]
    assert sorted(shards) == sorted(mine)


def test_the_cli_runs_the_job_on_a_scheduler(client, tmp_path):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with Catalog(url) as cat:
        paths = _dataset(cat, tmp_path)
        _delete_rows(cat, paths[4], _keys(4)[3])
    env = {"COLUMNS": "250", "NO_COLOR": "1"}
    args = ["--catalog", url, "--json", "verify", "train"]
    run = CliRunner().invoke(app, [*args, "--scheduler", client.scheduler.address], env=env)
    assert run.exit_code == 1, run.output
    here = CliRunner().invoke(app, args, env=env)
    assert here.exit_code == 1, here.output
    assert json.loads(run.stdout) == json.loads(here.stdout)
    assert "record-not-in-catalog" in run.stdout
    both = CliRunner().invoke(
        app, [*args, "--scheduler", client.scheduler.address, "--workers", "2"], env=env
    )
    assert both.exit_code == 2
    assert "leave --workers out" in both.output


def test_an_in_memory_catalog_is_refused(client):
    with Catalog("sqlite://") as cat, pytest.raises(shardcat.CatalogError, match="in-memory"):
        verify(cat, "train", client=client)
