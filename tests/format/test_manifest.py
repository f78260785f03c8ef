"""Version manifests (format/manifest.py): round trips, and every altered or foreign file refused."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardcat.catalog.manifests import replay
from shardcat.format.manifest import (
    AddedShard,
    ManifestError,
    Refs,
    RemovedRecords,
    VersionManifest,
    absolute_url,
    decode_manifest,
    decode_refs,
    encode_manifest,
    encode_refs,
    manifest_name,
    parse_name,
    relative_path,
)

_text = st.text(max_size=20)
_added = st.builds(
    AddedShard,
    path=_text,
    file_id=st.text("0123456789abcdef", min_size=32, max_size=32),
    kind=st.sampled_from(["native", "tar"]),
    record_count=st.integers(0, 10**9),
    size_bytes=st.integers(0, 2**62),
    shard_number=st.none() | st.integers(0, 10**6),
    group=st.none() | _text,
)
_removed = st.builds(
    RemovedRecords,
    path=_text,
    file_id=_text,
    offsets=st.none() | st.lists(st.integers(0, 2**62), max_size=20).map(tuple),
)
_manifests = st.builds(
    VersionManifest,
    version=st.integers(1, 10**12 - 1),
    operation=st.sampled_from(["write", "append", "delete", "compact", "move"]),
    message=st.none() | _text,
    created_at=st.just("2026-11-29T14:00:00+00:00"),
    records_added=st.integers(0, 2**40),
    records_removed=st.integers(0, 2**40),
    bytes_added=st.integers(0, 2**50),
    bytes_removed=st.integers(0, 2**50),
    total_records=st.integers(0, 2**40),
    total_bytes=st.integers(0, 2**50),
    added=st.lists(_added, max_size=5).map(tuple),
    removed=st.lists(_removed, max_size=5).map(tuple),
    root=st.none() | _text,
    groups_added=st.lists(_text, max_size=3).map(tuple),
    groups_dropped=st.lists(_text, max_size=3).map(tuple),
)


@given(_manifests)
def test_a_manifest_round_trips(m: VersionManifest) -> None:
    assert decode_manifest(encode_manifest(m), "x") == m


@given(st.dictionaries(_text, st.integers(1, 10**9), max_size=5), st.lists(st.integers(1, 99)))
def test_refs_round_trip(tags: dict[str, int], expired: list[int]) -> None:
    refs = Refs(tags, tuple(sorted(set(expired))))
    assert decode_refs(encode_refs(refs), "x") == refs


@given(_manifests, st.data())
def test_any_changed_byte_is_refused(m: VersionManifest, data: st.DataObject) -> None:
    raw = bytearray(encode_manifest(m))
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] = data.draw(st.integers(0, 255).filter(lambda b: b != raw[i]))
    try:
        decoded = decode_manifest(bytes(raw), "x")
    except ManifestError:
        return
    # Only a change JSON does not see (whitespace between tokens) may pass, and changes nothing.
    assert decoded == m


def _one(version: int = 1) -> VersionManifest:
    return VersionManifest(version, "write", None, "2026-11-29T14:00:00+00:00", 1, 0, 1, 0, 1, 1)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "not a shardcat history file"),
        (b"\xff\xfe", "not a shardcat history file"),
        (b'{"manifest": {}}', "not a shardcat history file"),
        (b"[1, 2]", "not a shardcat history file"),
        (b'{"manifest": [], "xxh64": "0"}', "checksum does not match"),
    ],
)
def test_foreign_files_are_refused_with_what_to_do(data: bytes, match: str) -> None:
    with pytest.raises(ManifestError, match=match):
        decode_manifest(data, "s3://b/ds/_versions/ds/000000000001.json")


def test_a_refs_file_is_not_a_manifest_and_a_newer_format_says_upgrade() -> None:
    with pytest.raises(ManifestError, match=r"is not 'shardcat\.version/1'"):
        decode_manifest(encode_refs(Refs()), "x")
    doc = json.loads(encode_manifest(_one()))
    doc["manifest"]["format"] = "shardcat.version/2"
    import xxhash

    body = json.dumps(doc["manifest"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    doc["xxh64"] = xxhash.xxh64_hexdigest(body.encode())
    with pytest.raises(ManifestError, match="upgrade shardcat"):
        decode_manifest(json.dumps(doc).encode(), "x")


def test_names_and_paths() -> None:
    assert manifest_name(42) == "000000000042.json"
    assert parse_name("000000000042.json") == (42, False)
    assert parse_name("000000000042.checkpoint.json") == (42, True)
    assert parse_name("refs.json") is None
    assert parse_name("42.json") is None
    assert relative_path("s3://b/ds/a.shard", "s3://b/ds") == "a.shard"
    assert relative_path("s3://b/other/a.shard", "s3://b/ds") == "s3://b/other/a.shard"
    assert absolute_url("a.shard", "s3://b/ds/") == "s3://b/ds/a.shard"
    assert absolute_url("/data/a.shard", "s3://b/ds") == "/data/a.shard"


def _added(path: str, n: int) -> AddedShard:
    return AddedShard(path, path.ljust(32, "0"), "native", n, 100, None)


def test_replay_decides_which_shards_kept_versions_read() -> None:
    v1 = VersionManifest(
        1, "write", None, "t", 4, 0, 4, 0, 4, 4, added=(_added("a", 2), _added("b", 2))
    )
    v2 = VersionManifest(
        2,
        "delete",
        None,
        "t",
        0,
        2,
        0,
        2,
        2,
        2,
        removed=(RemovedRecords("a", "a".ljust(32, "0"), None),),
    )
    v3 = VersionManifest(
        3,
        "delete",
        None,
        "t",
        0,
        1,
        0,
        1,
        1,
        1,
        removed=(RemovedRecords("b", "b".ljust(32, "0"), (7,)),),
    )
    plan = replay([v1, v2, v3], Refs({}, (1,)), "/r")
    # Version 1 expired: shard a, wholly removed at 2, is read by no kept version.
    assert sorted(plan.shards) == ["/r/b"] and plan.gone == ["/r/a"]
    assert plan.kept == [2, 3] and plan.latest == 3
    assert plan.shards["/r/b"].removed == {7: 3}
    with pytest.raises(ManifestError, match="lacks the manifest of version 2"):
        replay([v1, v3], Refs(), "/r")
    only_b = replace(v1, added=(_added("b", 2),))
    with pytest.raises(ManifestError, match="which no earlier manifest added"):
        replay([only_b, v2], Refs(), "/r")
    with pytest.raises(ManifestError, match="version 2 after it has no checkpoint"):
        replay([v2, v3], Refs({}, (1,)), "/r")
