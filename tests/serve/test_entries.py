"""An entry's bytes over HTTP: Range, ETag and 304, Cache-Control by version, hostile keys."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from shardcat.serve.entries import ByteSpan, Unsatisfiable, cache_control, parse_range

from .conftest import DOTS, HOSTILE, payload


def q(text: str) -> str:
    return quote(text, safe="")


def entry_url(key: str, entry: str, dataset: str = "train") -> str:
    return f"/api/v1/datasets/{q(dataset)}/samples/{q(key)}/entries/{q(entry)}"


# --- Range --------------------------------------------------------------------------------


def test_range_first_bytes_suffix_middle_and_open_end(served):
    data = payload("img/0005")["jpg"]
    url = entry_url("img/0005", "jpg")
    size = len(data)
    cases = {
        "bytes=0-99": (0, 100),
        "bytes=-50": (size - 50, size),
        "bytes=10-19": (10, 20),
        f"bytes={size - 5}-": (size - 5, size),
        f"bytes=0-{size + 1000}": (0, size),  # past the end: cut to it
        f"bytes=-{size + 10}": (0, size),  # a suffix longer than the entry: all of it
    }
    for header, (start, end) in cases.items():
        r = served.get(url, headers={"Range": header})
        assert r.status_code == 206, header
        assert r.content == data[start:end], header
        assert r.headers["content-range"] == f"bytes {start}-{end - 1}/{size}", header
        assert r.headers["content-length"] == str(end - start)
        assert r.headers["content-type"] == "image/jpeg"


def test_unsatisfiable_range_is_416(served):
    data = payload("img/0005")["jpg"]
    for header in (f"bytes={len(data)}-", f"bytes={len(data) + 7}-{len(data) + 9}", "bytes=-0"):
        r = served.get(entry_url("img/0005", "jpg"), headers={"Range": header})
        assert r.status_code == 416, header
        assert r.headers["content-range"] == f"bytes */{len(data)}"


def test_ignored_ranges_send_everything(served):
    data = payload("img/0005")["jpg"]
    for header in ("bytes=0-1,5-6", "items=0-5", "bytes=9-3", "bytes=-"):
        r = served.get(entry_url("img/0005", "jpg"), headers={"Range": header})
        assert r.status_code == 200, header
        assert r.content == data


def test_parse_range_unit():
    assert parse_range(None, 10) is None
    assert parse_range("bytes=2-4", 10) == ByteSpan(2, 5)
    assert parse_range("bytes=-3", 10) == ByteSpan(7, 10)
    assert parse_range("BYTES = 8 -", 10) == ByteSpan(8, 10)
    with pytest.raises(Unsatisfiable):
        parse_range("bytes=10-", 10)
    with pytest.raises(Unsatisfiable):
        parse_range("bytes=-1", 0)


# --- ETag and caching ---------------------------------------------------------------------


def test_etag_is_the_crc_and_if_none_match_answers_304(served):
    url = entry_url("img/0006", "jpg")
    first = served.get(url)
    etag = first.headers["etag"]
    assert etag.startswith('"') and etag.endswith('"')
    again = served.get(url, headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.content == b""
    assert again.headers["etag"] == etag
    assert served.get(url, headers={"If-None-Match": f'"nope", W/{etag}'}).status_code == 304
    assert served.get(url, headers={"If-None-Match": "*"}).status_code == 304
    assert served.get(url, headers={"If-None-Match": '"0-0"'}).status_code == 200
    other = served.get(entry_url("img/0007", "jpg")).headers["etag"]
    assert other != etag


def test_if_range_with_another_etag_sends_everything(served):
    url = entry_url("img/0006", "jpg")
    etag = served.get(url).headers["etag"]
    assert served.get(url, headers={"Range": "bytes=0-3", "If-Range": etag}).status_code == 206
    r = served.get(url, headers={"Range": "bytes=0-3", "If-Range": '"other"'})
    assert r.status_code == 200


def test_cache_control_is_immutable_at_a_version_number_only(served):
    url = entry_url("img/0001", "jpg")
    pinned = served.get(url, params={"version": "1"}).headers["cache-control"]
    assert pinned == "private, max-age=31536000, immutable"
    # The latest version changes with every commit, a tag with `shardcat tag --move`.
    assert served.get(url).headers["cache-control"] == "private, no-cache"
    assert served.get(url, params={"version": "v1"}).headers["cache-control"] == "private, no-cache"
    assert cache_control(pinned=True, private=False) == "public, max-age=31536000, immutable"


# --- hostile keys and names -----------------------------------------------------------------


@pytest.mark.parametrize("key", HOSTILE)
def test_hostile_keys_reach_their_own_sample(served, key):
    r = served.get(f"/api/v1/datasets/{q('team/odd')}/samples/{q(key)}")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["key"] == key and doc["dataset"] == "team/odd"
    hrefs = {e["name"]: e["href"] for e in doc["entries"]}
    assert served.get(hrefs["jpg"]).content == payload(key)["jpg"]
    assert served.get(entry_url(key, "txt", "team/odd")).text == payload(key)["txt"]


def test_a_nul_in_a_key(served):
    r = served.get(f"/api/v1/datasets/{q('team/odd')}/samples/{q('nul' + chr(0) + 'key')}")
    if served.nul:  # SQLite stores it
        assert r.status_code == 200
        assert r.json()["key"] == "nul\x00key"
    else:  # PostgreSQL cannot: a bad request, never a server error
        assert r.status_code in (400, 404), r.text
        assert r.json()["error"] in ("InvalidNameError", "KeyNotFoundError")


def test_dot_keys_are_reached_through_the_batch(served):
    r = served.post(f"/api/v1/datasets/{q('team/odd')}/batch", json={"keys": DOTS})
    lines = [json.loads(x) for x in r.text.splitlines()]
    assert [(x["key"], x["status"]) for x in lines] == [(".", "found"), ("..", "found")]


def test_traversal_and_encoding_tricks_find_nothing_else(served):
    odd = q("team/odd")
    # A key's slashes stay in the segment: "a" + "/b/c" is not a path to anything else.
    assert served.get(f"/api/v1/datasets/{odd}/samples/a/b/c").status_code == 404
    # Decoded once: %252F is the three characters %2F, a key of its own.
    r = served.get(f"/api/v1/datasets/{odd}/samples/%252F")
    assert r.status_code == 200 and r.json()["key"] == "%2F"
    # Not UTF-8.
    r = served.get(f"/api/v1/datasets/{odd}/samples/%FF%FE")
    assert r.status_code == 400 and r.json()["error"] == "BadRequestError"
    # A dataset's name is one segment: "team" + "odd" is no dataset.
    r = served.get("/api/v1/datasets/team/odd/samples/a")
    assert r.status_code == 404
    # A very long key that no record has.
    r = served.get(f"/api/v1/datasets/{odd}/samples/{'z' * 60000}")
    assert r.status_code in (400, 404) and r.json()["error"] in (
        "KeyNotFoundError",
        "InvalidKeyError",
    )
    # Unicode dataset name that does not exist.
    r = served.get(f"/api/v1/datasets/{q('データ')}")
    assert r.status_code == 404 and r.json()["error"] == "DatasetNotFoundError"


# --- what is read -------------------------------------------------------------------------


def test_a_revalidation_and_a_listing_read_no_shard(served, root):
    """304 and the sample's document come from the catalog's row: with the shard file gone,
    they still answer (what needs bytes fails, without a path in its answer)."""
    import os

    url = entry_url("img/0003", "jpg")
    etag = served.get(url).headers["etag"]
    for name in os.listdir(f"{root}/train"):
        if name.endswith(".shard"):
            os.remove(f"{root}/train/{name}")
    assert served.get(url, headers={"If-None-Match": etag}).status_code == 304
    assert served.get(url).status_code == 502


def test_compressed_entries_are_listed_as_they_are_served(catalog_url, tmp_path):
    import crc32c

    import shardcat
    from shardcat.reading import Catalog
    from shardcat.serve import ServeConfig

    from .conftest import client_for

    text = "compressible " * 5000
    blob = b"\x00" * 200_000
    raw = b"\x01" * 100_000
    with Catalog(catalog_url) as cat:
        cat.create_dataset("z", str(tmp_path / "z"))
        with shardcat.ShardWriter(str(tmp_path / "z" / "z-000000.shard")) as w:
            w.add(
                "k",
                {
                    "txt": shardcat.Entry(text.encode(), "text/plain", codec="zstd"),
                    "bin": shardcat.Entry(blob, "application/octet-stream", codec="zstd"),
                    "raw": shardcat.Entry(raw, "application/octet-stream"),
                },
            )
        cat.register_shard("z", w.close())
        described = {i.name: i for i in cat.describe("z", "k")}
        assert described["bin"].codec == "zstd" and described["bin"].size < len(blob)
        assert described["raw"].size == 100_000
    config = ServeConfig(catalogs=(("main", catalog_url),), allow_anonymous=True, rate_limit=0)
    with client_for(config) as client:
        doc = client.get("/api/v1/datasets/z/samples/k").json()
        entries = {e["name"]: e for e in doc["entries"]}
        assert [e["name"] for e in doc["entries"]] == ["txt", "bin", "raw"]
        assert entries["txt"]["size"] == len(text) and entries["txt"]["inline"] == text
        assert entries["bin"]["size"] == len(blob)
        assert entries["bin"]["crc32c"] == f"{crc32c.crc32c(blob):08x}"
        assert entries["raw"]["crc32c"] == f"{crc32c.crc32c(raw):08x}"
        r = client.get(entries["bin"]["href"])
        assert r.content == blob
        assert (
            client.get(
                entries["bin"]["href"], headers={"If-None-Match": r.headers["etag"]}
            ).status_code
            == 304
        )
        part = client.get(entries["bin"]["href"], headers={"Range": "bytes=-10"})
        assert part.status_code == 206 and part.content == blob[-10:]


def test_tars_indexed_in_place_are_served_too(catalog_url, tmp_path):
    import crc32c

    from shardcat.format.tar import scan_tar
    from shardcat.reading import Catalog
    from shardcat.serve import ServeConfig
    from shardcat.testing.tars import wds_samples, write_wds_tar

    from .conftest import client_for

    tar = write_wds_tar(tmp_path / "a.tar")
    with Catalog(catalog_url) as cat:
        cat.create_dataset("wds", str(tmp_path))
        cat.register_shard("wds", scan_tar(tar))
    config = ServeConfig(catalogs=(("main", catalog_url),), allow_anonymous=True, rate_limit=0)
    with client_for(config) as client:
        for sample in wds_samples(tar)[:5]:
            key = sample["__key__"]
            doc = client.get(f"/api/v1/datasets/wds/samples/{q(key)}").json()
            names = [e["name"] for e in doc["entries"]]
            assert sorted(names) == sorted(n for n in sample if n != "__key__")
            for e in doc["entries"]:
                r = client.get(e["href"])
                assert r.status_code == 200
                assert r.content == sample[e["name"]]
                assert e["crc32c"] == f"{crc32c.crc32c(r.content):08x}"
                assert e["size"] == len(r.content)
                again = client.get(e["href"], headers={"If-None-Match": r.headers["etag"]})
                assert again.status_code == 304
