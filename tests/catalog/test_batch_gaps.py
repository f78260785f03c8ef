"""The gap policy of batch lookups: which ranges are merged, how many requests and bytes.

Remote shards (S3 on moto, fsspec's memory store) read through gaps of up
to ``remote_max_gap`` bytes (by default derived per store, and never adding
more than the records' own bytes: ``storage/gap.py``); local shards merge
only gaps of up to 8 KiB, whatever it says. Requests are counted where they are sent
(``S3FileSystem._call_s3``, ``MemoryFileSystem.cat_file``, ``os.pread``).
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

import shardcat
from shardcat.reading import Catalog
from shardcat.storage import REMOTE_MAX_GAP_ENV, resolve_remote_max_gap

from .helpers import ReadCounter

PAYLOAD = 10_000
N = 120
# Records 0 and 1 touch; 10 lies ~80 KB after 1; 100 lies ~900 KB after 10.
ASKED = [100, 1, 10, 0]


def key(i: int) -> str:
    return f"k/{i:04d}"


@pytest.fixture(params=["memory", "s3", "local"])
def shard(request: pytest.FixtureRequest, tmp_path: Any) -> dict[str, Any]:
    """One shard of 120 records of ~10 KB, and where each record lies in it."""
    if request.param == "local":
        root, options = str(tmp_path), None
    elif request.param == "memory":
        root, options = f"memory://gaps-{tmp_path.name}", None
    else:
        s3 = request.getfixturevalue("s3")
        root, options = f"{s3['url']}/gaps", s3["storage_options"]
        # Requests are counted in s3fs (S3FileSystem._call_s3): read through it, not obstore.
        shardcat.config.set(s3_transport="fsspec")
    url = f"{root}/train-000000.shard"
    with shardcat.ShardWriter(url, storage_options=options) as w:
        for i in range(N):
            w.add(key(i), {"bin": bytes([i]) * PAYLOAD})
    info = w.close()
    rows = shardcat.ShardReader(url, storage_options=options).footer.records
    spans = [(int(r["offset"]), int(r["offset"]) + int(r["length"])) for r in rows]
    kind = {"local": "pread", "memory": "memory", "s3": "s3"}[request.param]
    return {"root": root, "options": options, "info": info, "spans": spans, "kind": kind}


def batch(catalog_url: str, shard: dict[str, Any], reads: ReadCounter, **kwargs: Any) -> list[Any]:
    """The reads of one get_many of ASKED (checked), on a catalog opened with ``kwargs``."""
    with Catalog(catalog_url, storage_options=shard["options"], **kwargs) as cat:
        if not cat.datasets():
            cat.create_dataset("train", shard["root"])
            cat.register_shard("train", shard["info"])
        reads.clear()
        result = cat.get_many("train", [key(i) for i in ASKED])
        got = [(r.key, bytes(r["bin"].data)) for r in result]
    assert got == [(key(i), bytes([i]) * PAYLOAD) for i in ASKED]
    return [(s, e) for kind, s, e in reads.reads if kind == shard["kind"]]


def test_remote_reads_through_gaps_up_to_the_setting(
    catalog_url: str, shard: dict[str, Any], reads: ReadCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    shardcat.config.set(remote_max_gap=None)
    sp = shard["spans"]
    exact = [(sp[0][0], sp[1][1]), (sp[10][0], sp[10][1]), (sp[100][0], sp[100][1])]
    merged_near = [(sp[0][0], sp[10][1]), (sp[100][0], sp[100][1])]
    if shard["kind"] == "pread":
        # Local files keep their own 8 KiB gap, whatever the remote setting.
        for setting in (None, 0, "4MiB"):
            assert batch(catalog_url, shard, reads, remote_max_gap=setting) == exact
        return
    # 0: only touching records share a request; 3 requests, exactly the records' bytes.
    assert batch(catalog_url, shard, reads, remote_max_gap=0) == exact
    # 100 KiB: the 80 KB gap is read through, the 900 KB one is not.
    assert batch(catalog_url, shard, reads, remote_max_gap="100KiB") == merged_near
    # 1 MiB: one request from the first record to the last.
    assert batch(catalog_url, shard, reads, remote_max_gap="1MiB") == [(sp[0][0], sp[100][1])]
    # The default, derived: the 80 KB gap alone would double the ~40 KB of records
    # asked for, past the read budget, so nothing is read through.
    assert batch(catalog_url, shard, reads) == exact
    assert batch(catalog_url, shard, reads, remote_max_gap="auto") == exact
    # The environment sets the default, an argument overrides it.
    shardcat.config.set(remote_max_gap="1MiB")
    assert batch(catalog_url, shard, reads) == [(sp[0][0], sp[100][1])]
    assert batch(catalog_url, shard, reads, remote_max_gap=102_400) == merged_near
    assert batch(catalog_url, shard, reads, remote_max_gap="auto") == exact


def test_the_setting_travels_with_the_catalog_handle(sqlite_url: str) -> None:
    with Catalog(sqlite_url, remote_max_gap="256KiB") as cat:
        assert cat.remote_max_gap == 256 * 1024
        handle = pickle.loads(pickle.dumps(cat.handle()))
        assert handle.remote_max_gap == 256 * 1024
        with handle.open() as again:
            assert again.remote_max_gap == 256 * 1024
        with pickle.loads(pickle.dumps(cat)) as copy:
            assert copy.remote_max_gap == 256 * 1024


def test_resolving_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    shardcat.config.set(remote_max_gap=None)
    assert resolve_remote_max_gap() is None  # auto: derived per store (storage/gap.py)
    assert resolve_remote_max_gap("auto") is None
    assert resolve_remote_max_gap(" AUTO ") is None
    assert resolve_remote_max_gap(0) == 0
    assert resolve_remote_max_gap("64KiB") == 65536
    shardcat.config.set(remote_max_gap="2MB")
    assert resolve_remote_max_gap() == 2_000_000
    assert resolve_remote_max_gap(5) == 5
    shardcat.config.set(remote_max_gap="262144")
    assert resolve_remote_max_gap() == 262144


@pytest.mark.parametrize("bad", [-1, "lots", True, "-3MiB"])
def test_a_bad_setting_is_refused_when_the_catalog_opens(sqlite_url: str, bad: Any) -> None:
    with pytest.raises(shardcat.errors.SettingError, match="remote_max_gap"):
        Catalog(sqlite_url, remote_max_gap=bad)


def test_a_bad_environment_variable_names_itself(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REMOTE_MAX_GAP_ENV, "a lot")
    shardcat.config.refresh()
    with pytest.raises(
        shardcat.errors.SettingError, match=f"{REMOTE_MAX_GAP_ENV}='a lot' is not a size"
    ):
        Catalog(sqlite_url)


def test_records_read_through_wide_gaps_keep_only_their_own_bytes(
    sqlite_url: str, shard: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    shardcat.config.set(remote_max_gap="1MiB")
    with Catalog(sqlite_url, storage_options=shard["options"]) as cat:
        cat.create_dataset("train", shard["root"])
        cat.register_shard("train", shard["info"])
        records = cat.get_many("train", [key(i) for i in ASKED]).records
    held = {id(b): len(b) for b in (r._buf.obj for r in records if r is not None)}
    # One read of ~1 MB served four records of ~10 KB: they hold their ~40 KB, not the read.
    assert sum(held.values()) < 2 * len(ASKED) * (PAYLOAD + 1024)
    assert [bytes(r["bin"].data) for r in records if r is not None] == [
        bytes([i]) * PAYLOAD for i in ASKED
    ]


def test_entries_read_through_wide_gaps_keep_only_their_own_bytes(
    sqlite_url: str, shard: dict[str, Any], reads: ReadCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    shardcat.config.set(remote_max_gap="1MiB")
    with Catalog(sqlite_url, storage_options=shard["options"]) as cat:
        cat.create_dataset("train", shard["root"])
        cat.register_shard("train", shard["info"])
        reads.clear()
        records = cat.get_many("train", [key(i) for i in ASKED], entries=["bin"]).records
    views = [r["bin"].data for r in records if r is not None]
    assert views == [bytes([i]) * PAYLOAD for i in ASKED]
    if shard["kind"] != "pread":
        assert len([s for kind, s, _ in reads.reads if kind == shard["kind"]]) == 1
    held = {id(e._stored.obj): len(e._stored.obj) for e in (r["bin"] for r in records if r)}
    assert sum(held.values()) < 2 * len(ASKED) * (PAYLOAD + 1024)
