"""Tar shards in the catalog: registered in place, looked up CRC-checked, verified, deleted.

Every test runs on SQLite and PostgreSQL (``catalog_url``). Tars are written
by webdataset's own TarWriter, by tarfile (GNU and PAX, long names) and by
GNU tar; every sample read through the catalog equals what webdataset reads.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
import uuid

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardcat.catalog import downgrade, head_revision, upgrade
from shardcat.errors import ChecksumError, DuplicateKeyError, FormatError
from shardcat.format.tar import scan_tar
from shardcat.reading import Catalog
from shardcat.testing.tars import record_as_sample, wds_samples, write_wds_tar


def _as_dict(record) -> dict[str, object]:
    return record_as_sample(record)


@pytest.fixture
def tar_path(tmp_path):
    return write_wds_tar(tmp_path / "a.tar")


@pytest.fixture
def registered(catalog_url, tar_path):
    with Catalog(catalog_url) as cat:
        cat.create_dataset("wds", str(tar_path.parent), exist_ok=True)
        row = cat.register_shard("wds", scan_tar(tar_path))
        yield cat, row


def test_every_sample_reads_back_as_webdataset_reads_it(registered, tar_path):
    cat, row = registered
    assert row.kind == "tar"
    assert row.record_count == 40
    expected = wds_samples(tar_path)
    got = [_as_dict(cat.get("wds", s["__key__"])) for s in expected]
    assert got == expected
    batch = cat.get_many("wds", [s["__key__"] for s in reversed(expected)] + ["nope"])
    assert [_as_dict(r) for r in batch if r is not None] == list(reversed(expected))
    assert batch.missing == ["nope"]


def test_entries_read_only_those_payloads(registered, tar_path, reads):
    cat, _ = registered
    expected = {s["__key__"]: s for s in wds_samples(tar_path)}
    key = "s0/sample00000"
    cat.get("wds", key)  # the tar is open: what follows is the lookup's own read
    reads.clear()
    rec = cat.get("wds", key, entries=["cls"])
    assert set(rec.entries) == {"cls"}
    assert bytes(rec.entries["cls"].data) == expected[key]["cls"]
    assert reads.count == 1
    assert reads.nbytes == len(expected[key]["cls"])  # only the payload, not the sample
    many = cat.get_many("wds", list(expected)[:5], entries=["json", "seg.png"])
    for r in many:
        assert r is not None
        for name, e in r.entries.items():
            assert bytes(e.data) == expected[r.key][name]


def test_locate_covers_the_members_of_the_sample(registered, tar_path):
    cat, _ = registered
    info = scan_tar(tar_path)
    loc = cat.locate("wds", info.keys[3])
    assert (loc.offset, loc.length) == (int(info.offsets[3]), int(info.lengths[3]))
    assert loc.url == str(tar_path)


def test_a_tar_changed_after_indexing_is_reported_never_served(registered, tar_path):
    cat, _ = registered
    info = scan_tar(tar_path)
    sample = info.samples()[5]
    entry = sample.entries[0]
    data = bytearray(tar_path.read_bytes())
    data[entry.payload_offset] ^= 0x01
    tar_path.write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match="CRC32C"):
        cat.get("wds", sample.key)
    with pytest.raises(ChecksumError):
        cat.get("wds", sample.key, entries=[entry.name])
    with pytest.raises(ChecksumError):
        cat.get_many("wds", [sample.key])
    cat.get("wds", info.keys[0])  # other samples are still served
    report = cat.verify("wds")
    assert not report.ok
    kinds = {p.kind for p in report.problems}
    assert "shard-mismatch" in kinds  # the tar's id (a digest of its rows) changed
    assert any(sample.key in p.keys for p in report.problems)


@pytest.mark.usefixtures("registered")
def test_a_row_whose_spans_do_not_fit_its_layout_is_reported_with_what_to_do(catalog_url, tar_path):
    engine = sa.create_engine(catalog_url)
    try:
        with engine.begin() as conn:  # 5 bytes: no whole span of any of the 4 entries
            conn.execute(sa.text("UPDATE records SET spans = :spans"), {"spans": b"\x00" * 5})
    finally:
        engine.dispose()
    key = "s0/sample00000"
    inconsistent = "catalog row is inconsistent: spans of 5 bytes do not describe 4 entries"
    with Catalog(catalog_url) as cat:
        with pytest.raises(FormatError, match=f"{inconsistent}; re-index the tar") as whole:
            cat.get("wds", key)
        assert whole.value.path == str(tar_path) and whole.value.offset == 0
        with pytest.raises(FormatError, match=f"{inconsistent}; rebuild it with reindex"):
            cat.get("wds", key, entries=["cls"])
        with pytest.raises(FormatError, match=f"{inconsistent}; re-index the tar"):
            cat.get_many("wds", [key])


def test_verify_passes_on_an_untouched_tar_and_reports_a_missing_or_broken_one(
    registered, tar_path
):
    cat, _ = registered
    report = cat.verify("wds")
    assert report.ok, report.problems
    assert report.records_checked == 40
    tar_path.write_bytes(tar_path.read_bytes()[:1000])  # truncated: the re-scan fails
    (problem,) = cat.verify("wds").problems
    assert problem.kind == "corrupt" and str(tar_path) in problem.message
    tar_path.unlink()
    (problem,) = cat.verify("wds").problems
    assert problem.kind == "missing"


def test_shard_rows_and_sql_say_tar(registered, catalog_url):
    cat, row = registered
    assert [s.kind for s in cat.shards("wds")] == ["tar"]
    assert row.metadata["tar"]["member_count"] >= 40
    engine = sa.create_engine(catalog_url)
    with engine.connect() as conn:
        kinds = conn.execute(sa.text("SELECT kind, count(*) FROM shards GROUP BY kind")).all()
        layouts = conn.execute(sa.text("SELECT DISTINCT codec FROM layout_entries")).all()
    engine.dispose()
    assert kinds == [("tar", 1)]
    assert layouts == [("none",)]


def test_a_key_in_two_tars_is_refused(catalog_url, tmp_path):
    a = write_wds_tar(tmp_path / "a.tar", n=5)
    b = write_wds_tar(tmp_path / "b.tar", n=5)
    with Catalog(catalog_url) as cat:
        cat.create_dataset("wds", str(tmp_path))
        cat.register_shard("wds", scan_tar(a))
        with pytest.raises(DuplicateKeyError):
            cat.register_shard("wds", scan_tar(b))


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_tarfile_long_names_gnu_and_pax(catalog_url, tmp_path, fmt):
    long_dir = "d" * 120 + "/sub"
    members = [
        (f"{long_dir}/k{i}.{ext}", f"{i}-{ext}".encode() * 50)
        for i in range(4)
        for ext in ("txt", "bin")
    ]
    path = tmp_path / "long.tar"
    with tarfile.open(path, "w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with Catalog(catalog_url) as cat:
        cat.create_dataset("long", str(tmp_path))
        cat.register_shard("long", scan_tar(path))
        expected = wds_samples(path)
        assert [_as_dict(cat.get("long", s["__key__"])) for s in expected] == expected
        assert expected[0]["__key__"] == f"{long_dir}/k0"


@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar is not installed")
def test_gnu_tar_command(catalog_url, tmp_path):
    src = tmp_path / "src"
    (src / "x").mkdir(parents=True)
    for i in range(3):
        (src / "x" / f"{i:03d}.txt").write_text(f"text {i}")
        (src / "x" / f"{i:03d}.json").write_text(json.dumps({"i": i}))
    path = tmp_path / "gnu.tar"
    subprocess.run(
        ["tar", "--format=gnu", "--sort=name", "-cf", str(path), "-C", str(src), "x"], check=True
    )
    with Catalog(catalog_url) as cat:
        cat.create_dataset("gnu", str(tmp_path))
        cat.register_shard("gnu", scan_tar(path))
        expected = wds_samples(path)
        assert len(expected) == 3
        assert [_as_dict(cat.get("gnu", s["__key__"])) for s in expected] == expected


def test_delete_keeps_tars_unless_asked(catalog_url, tmp_path):
    from shardcat.orchestration.gc import delete_dataset

    a = write_wds_tar(tmp_path / "a.tar", n=3)
    with Catalog(catalog_url) as cat:
        cat.create_dataset("wds", str(tmp_path))
        cat.register_shard("wds", scan_tar(a))
        report = delete_dataset(cat, "wds")
        assert a.exists() and report.removed == []
        assert any("indexed in place" in k for k in report.kept)
        assert [d.name for d in cat.datasets()] == []
        cat.create_dataset("wds", str(tmp_path))
        cat.register_shard("wds", scan_tar(a))
        report = delete_dataset(cat, "wds", delete_tars=True)
        assert not a.exists() and report.removed == [str(a)]


def test_upgrade_from_0003_keeps_the_data_and_makes_every_shard_native(catalog_url, local_root):
    from .helpers import make_dataset, shard_keys

    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 2)
    downgrade(catalog_url, "0003")
    engine = sa.create_engine(catalog_url)
    with engine.connect() as conn:
        columns = {c["name"] for c in sa.inspect(conn).get_columns("shards")}
        before = conn.execute(sa.text("SELECT count(*) FROM records")).scalar_one()
    engine.dispose()
    assert "kind" not in columns
    assert upgrade(catalog_url) == ("0003", head_revision())
    engine = sa.create_engine(catalog_url)
    with engine.connect() as conn:
        kinds = conn.execute(sa.text("SELECT DISTINCT kind FROM shards")).scalars().all()
        after = conn.execute(sa.text("SELECT count(*) FROM records")).scalar_one()
        with pytest.raises(sa.exc.IntegrityError):
            conn.execute(sa.text("UPDATE shards SET kind = 'zip'"))
    engine.dispose()
    assert kinds == ["native"] and after == before
    with Catalog(catalog_url) as cat:
        assert cat.get_many("train", shard_keys(0) + shard_keys(1)).ok
        # The downgrade rewrote the catalog's history; the folder keeps the one written before.
        assert cat.verify("train", history=False).ok
        assert {s.kind for s in cat.shards("train")} == {"native"}


def test_every_kind_the_schema_allows_has_its_operations():
    from shardcat.catalog.kinds import KINDS, shard_kind
    from shardcat.catalog.models import SHARD_KINDS

    assert tuple(KINDS) == SHARD_KINDS
    # The read layer reads every kind the catalog registers, and no other.
    from shardcat.reading.checks import CHECKS, SUMMARIES
    from shardcat.reading.decode import DECODERS

    assert tuple(DECODERS) == tuple(CHECKS) == tuple(SUMMARIES) == SHARD_KINDS
    with pytest.raises(FormatError, match="unknown"):
        shard_kind("zip")


def test_gc_forgets_an_aborted_tar_row_but_never_deletes_the_tar(catalog_url, tmp_path):
    from shardcat.orchestration.gc import gc

    a = write_wds_tar(tmp_path / "a.tar", n=3)
    with Catalog(catalog_url) as cat:
        cat.create_dataset("wds", str(tmp_path))  # the tar lies under the dataset's root
        job = cat.begin_job("wds")
        cat.register_shard("wds", scan_tar(a), job=job)
        cat.abort_job(job)
        assert [s.state for s in cat.shards("wds", state=None)] == ["deleted"]
        report = gc(cat, "wds")
        assert a.exists()
        assert report.deleted_shards == [] and report.orphans == []
        assert any("indexed in place" in k for k in report.kept)
        assert cat.shards("wds", state=None) == []  # the tombstone is forgotten


def test_reindex_kind_tar_rescans_a_changed_tar(registered, tar_path):
    cat, _ = registered
    write_wds_tar(tar_path, n=12, seed=7, prefix="new")  # rewritten in place
    assert not cat.verify("wds").ok
    (row,) = cat.reindex("wds", [str(tar_path)], kind="tar")
    assert row.kind == "tar" and row.record_count == 12
    assert cat.verify("wds").ok
    expected = wds_samples(tar_path)
    assert [_as_dict(cat.get("wds", s["__key__"])) for s in expected] == expected


_NAMES = st.sampled_from(["jpg", "cls", "json", "seg.png", "txt"])
_SAMPLES = st.dictionaries(
    st.from_regex(r"[a-z]{1,6}(/[a-z0-9]{1,8}){0,2}", fullmatch=True),
    st.dictionaries(_NAMES, st.binary(max_size=1500), min_size=1, max_size=4),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    samples=_SAMPLES, fmt=st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]), data=st.data()
)
def test_any_tar_reads_back_through_the_catalog_as_webdataset_reads_it(
    tmp_path, samples, fmt, data
):
    path = tmp_path / f"h-{uuid.uuid4().hex[:8]}.tar"
    with tarfile.open(path, "w", format=fmt) as tar:
        for key, entries in samples.items():
            for name, payload in entries.items():
                info = tarfile.TarInfo(f"{key}.{name}")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    expected = wds_samples(path)
    with Catalog("sqlite://") as cat:
        cat.create_dataset("h", str(tmp_path))
        cat.register_shard("h", scan_tar(path))
        assert [_as_dict(cat.get("h", s["__key__"])) for s in expected] == expected
        keys = [s["__key__"] for s in expected]
        assert [_as_dict(r) for r in cat.get_many("h", keys)] == expected
        wanted = data.draw(st.sets(_NAMES, min_size=1))
        for s in expected:
            rec = cat.get("h", s["__key__"], entries=wanted)
            assert {n: bytes(e.data) for n, e in rec.entries.items()} == {
                n: v for n, v in s.items() if n in wanted
            }
