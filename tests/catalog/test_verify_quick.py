"""``verify(quick=True)``: each shard's ends and its rows' count and span, no record read.

Each test runs on SQLite and PostgreSQL (``cat``). The quick check must find what
it promises (a missing, replaced, truncated or damaged file; rows lost, added or
out of the file's records) and report nothing on a catalog with a varied history;
what only the full verify can see (a payload byte) it must not claim to check.
"""

from __future__ import annotations

import os

import sqlalchemy as sa
from typer.testing import CliRunner

from shardcat.cli.app import app
from shardcat.format.spec import HEADER_SIZE, TRAILER_SIZE

from .helpers import fill_with_history, flip_byte, make_dataset, shard_keys, write_shard


def _shard_id(cat, path: str) -> int:
    with cat.engine.connect() as conn:
        return int(
            conn.execute(sa.text("SELECT id FROM shards WHERE url = :u"), {"u": path}).scalar_one()
        )


def test_a_catalog_with_history_has_no_problems(cat, local_root):
    fill_with_history(cat, local_root)
    for dataset in ("train", "h"):
        report = cat.verify(dataset, quick=True)
        assert report.ok, report
        assert report.quick and "quick" in str(report)
    report = cat.verify("train", quick=True)
    # Three shards (two of samples, one of the column group); every row counted.
    assert report.shards_checked == 3
    assert report.records_checked == 2 * len(shard_keys(0)) + 3
    assert report.bytes_checked == 3 * (HEADER_SIZE + TRAILER_SIZE)
    assert cat.dataset("train").verify(quick=True, version=1).ok


def test_each_problem_it_promises_is_found(cat, local_root):
    infos = make_dataset(cat, local_root, 9)
    assert cat.verify("train", quick=True).ok
    # 0: deleted.  1: replaced by another shard (same keys, new file id).  2: cut short.
    # 3: its trailer damaged.  4: its header damaged.  5: the header of another shard (the
    # two ends of two files).  6: a row lost.  7: a row moved past the footer.  8: one moved
    # into the header.
    os.remove(infos[0].path)
    write_shard(infos[1].path, shard_keys(1))
    with open(infos[2].path, "r+b") as f:
        f.truncate(os.path.getsize(infos[2].path) - 10)
    flip_byte(infos[3].path, os.path.getsize(infos[3].path) - TRAILER_SIZE + 20)
    flip_byte(infos[4].path, 20)
    other = write_shard(f"{local_root}/other.shard", shard_keys(5))
    with open(other.path, "rb") as f, open(infos[5].path, "r+b") as g:
        g.write(f.read(HEADER_SIZE))
    with cat.engine.begin() as conn:
        conn.execute(
            sa.text("DELETE FROM records WHERE shard_id = :s AND key = :k"),
            {"s": _shard_id(cat, infos[6].path), "k": shard_keys(6)[0]},
        )
        for i, offset in ((7, infos[7].size), (8, HEADER_SIZE - 8)):
            conn.execute(
                sa.text("UPDATE records SET byte_offset = :o WHERE shard_id = :s AND key = :k"),
                {"o": offset, "s": _shard_id(cat, infos[i].path), "k": shard_keys(i)[3]},
            )
    report = cat.verify("train", quick=True)
    kinds = {url: sorted(p.kind for p in ps) for url, ps in report.by_shard().items()}
    assert kinds == {
        infos[0].path: ["missing"],
        infos[1].path: ["shard-mismatch"],
        infos[2].path: ["unreadable"],  # its last 64 bytes are no trailer now
        infos[3].path: ["unreadable"],
        infos[4].path: ["unreadable"],
        infos[5].path: ["shard-mismatch"],
        infos[6].path: ["row-count"],
        infos[7].path: ["row-out-of-range"],
        infos[8].path: ["row-out-of-range"],
    }
    problems = {p.url: p for p in report.problems}
    assert "file_id" in problems[infos[1].path].message
    assert "reindex" in problems[infos[1].path].message
    assert "CRC32C" in problems[infos[3].path].message
    assert "CRC32C" in problems[infos[4].path].message
    # Another file's header: its id and CRC differ from the row, and from the trailer's record.
    assert "file_id" in problems[infos[5].path].message
    assert "header_crc (header" in problems[infos[5].path].message
    assert f"{len(shard_keys(6)) - 1} row(s)" in problems[infos[6].path].message
    assert f"outside its records' {HEADER_SIZE}-" in problems[infos[8].path].message
    # The shards are the source of truth: reindexing the intact ones repairs their rows.
    cat.reindex("train", [infos[i].path for i in (1, 6, 7, 8)])
    assert set(cat.verify("train", quick=True).by_shard()) == {
        infos[i].path for i in (0, 2, 3, 4, 5)
    }


def test_a_store_that_fails_is_one_shards_problem(cat, local_root, monkeypatch):
    """Whatever one shard's store raises, it is reported and the other shards are checked."""
    import shardcat.reading.ends as ends

    infos = make_dataset(cat, local_root, 3)
    real = ends.open_source

    def failing(url, storage_options=None):
        if url == infos[1].path:
            raise RuntimeError("the backend is not installed")
        return real(url, storage_options)

    monkeypatch.setattr(ends, "open_source", failing)
    report = cat.verify("train", quick=True)
    assert [(p.url, p.kind) for p in report.problems] == [(infos[1].path, "unreadable")]
    assert "RuntimeError: the backend is not installed" in report.problems[0].message
    assert report.shards_checked == 3


def test_a_payload_byte_is_the_full_checks_to_find(cat, local_root):
    """What the quick check does not read it does not claim: the full verify finds it."""
    infos = make_dataset(cat, local_root, 1)
    flip_byte(infos[0].path, int(infos[0].records["offset"][5]) + 40)
    assert cat.verify("train", quick=True).ok
    assert [p.kind for p in cat.verify("train").problems] == ["corrupt"]


def test_a_tar_is_checked_by_its_size(cat, tmp_path):
    from shardcat.format.tar import scan_tar
    from shardcat.testing.tars import write_wds_tar

    tar = write_wds_tar(tmp_path / "a.tar")
    cat.create_dataset("tars", str(tmp_path))
    cat.register_shard("tars", scan_tar(tar))
    assert cat.verify("tars", quick=True).ok
    with open(tar, "ab") as f:
        f.write(b"\0" * 512)
    problems = cat.verify("tars", quick=True).problems
    assert [p.kind for p in problems] == ["shard-mismatch"]
    assert "size_bytes" in problems[0].message


def test_the_command(cat, local_root):
    infos = make_dataset(cat, local_root, 2)
    url = cat.engine.url.render_as_string(hide_password=False)

    def verify(*more: str):
        # Wide: a usage error's panel would break a long temporary path inside a word.
        return CliRunner().invoke(
            app,
            ["--catalog", url, "verify", "train", "--quick", *more],
            env={"COLUMNS": "250", "NO_COLOR": "1"},
        )

    ok = verify()
    assert ok.exit_code == 0, ok.output
    os.remove(infos[1].path)
    bad = verify()
    assert bad.exit_code == 1 and "missing" in bad.output
    refused = verify("--scheduler", "tcp://127.0.0.1:1")
    assert refused.exit_code == 2 and "--scheduler" in refused.output


def test_on_every_store(cat, store):
    """Local, memory and S3 (moto): the ends are read with the dataset's storage options."""
    infos = make_dataset(cat, store["root"], 2, storage_options=store["storage_options"])
    cat.storage_options = store["storage_options"] or {}
    assert cat.verify("train", quick=True).ok
    import fsspec

    fs, path = fsspec.core.url_to_fs(infos[0].path, **(store["storage_options"] or {}))
    fs.rm(path)
    assert [(p.url, p.kind) for p in cat.verify("train", quick=True).problems] == [
        (infos[0].path, "missing")
    ]
