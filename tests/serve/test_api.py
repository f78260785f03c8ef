"""Every endpoint of ``shardcat serve`` against real SQLite and PostgreSQL catalogs."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import crc32c

from shardcat.reading import Catalog

from .conftest import KEYS, payload, write


def q(text: str) -> str:
    return quote(text, safe="")


def test_health_needs_no_token(served):
    r = served.client.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


def test_datasets_lists_names_versions_counts_sizes_tags(served):
    r = served.get("/api/v1/datasets")
    assert r.status_code == 200
    by_name = {d["name"]: d for d in r.json()["datasets"]}
    assert set(by_name) == {"train", "val", "team/odd"}
    train = by_name["train"]
    assert train["catalog"] == "main"
    assert train["version"] == 2
    assert train["record_count"] == 30
    assert train["shard_count"] == 2
    assert train["size_bytes"] > 0
    assert train["tags"] == {"v1": 1}
    assert "root_url" not in train


def test_dataset_info_with_stats_at_a_version(served):
    latest = served.get("/api/v1/datasets/train").json()
    assert latest["record_count"] == 30
    assert latest["stats_version"] == 2
    kinds = {k["name"]: k for k in latest["entry_kinds"]}
    assert kinds["jpg"]["content_type"] == "image/jpeg"
    assert kinds["json"]["content_type"] == "application/json"
    assert kinds["txt"]["content_type"].startswith("text/plain")
    assert kinds["bin"]["content_type"] == "application/octet-stream"
    old = served.get("/api/v1/datasets/train", params={"version": "v1"}).json()
    assert old["record_count"] == 20
    assert old["stats_version"] == 1
    r = served.get("/api/v1/datasets/train", params={"version": "7"})
    assert r.status_code == 404
    assert r.json()["error"] == "VersionNotFoundError"


def test_versions_and_tags(served):
    versions = served.get("/api/v1/datasets/train/versions").json()["versions"]
    assert [v["number"] for v in versions] == [2, 1]
    assert versions[1]["tags"] == ["v1"]
    assert versions[0]["total_records"] == 30
    assert served.get("/api/v1/datasets/train/tags").json() == {"tags": {"v1": 1}}


def test_keys_pages_with_a_cursor_until_the_end(served):
    seen, after = [], None
    pages = 0
    while True:
        params = {"prefix": "img/", "limit": "7"}
        if after is not None:
            params["after"] = after
        page = served.get("/api/v1/datasets/train/keys", params=params).json()
        pages += 1
        seen += page["keys"]
        after = page["next"]
        if after is None:
            break
        assert after == page["keys"][-1]
    assert seen == sorted(KEYS)
    assert pages == 5  # 7 + 7 + 7 + 7 + 2
    exact = served.get("/api/v1/datasets/train/keys", params={"limit": "30"}).json()
    assert len(exact["keys"]) == 30 and exact["next"] is None
    narrow = served.get("/api/v1/datasets/train/keys", params={"prefix": "img/001"}).json()
    assert narrow["keys"] == [f"img/001{i}" for i in range(10)]


def test_keys_of_a_dataset_without_key_order_are_a_client_error(served, root):
    """An unsorted or hash-only dataset cannot list keys: 400 saying why and what to do."""
    with Catalog(served.url) as cat:
        for name, mode in (("u", "unsorted"), ("h", "hash")):
            cat.create_dataset(name, f"{root}/{name}", keys=mode)
            write(cat, name, f"{root}/{name}", ["a/0", "a/1"])
    for name, error in (("u", "KeyOrderUnavailableError"), ("h", "KeyTextUnavailableError")):
        r = served.get(f"/api/v1/datasets/{name}/keys", params={"prefix": "a/"})
        assert r.status_code == 400, r.text
        body = r.json()
        assert body["error"] == error
        assert f'keys="{"unsorted" if name == "u" else "hash"}"' in body["message"]
        assert body["hint"]
        # Its samples are served by key as any dataset's.
        sample = served.get(f"/api/v1/datasets/{name}/samples/a%2F1")
        assert sample.status_code == 200 and sample.json()["key"] == "a/1"


def test_keys_at_a_version_are_the_ones_it_reads(served):
    # Version 1 (tag v1) had the first 20 keys; version 2 added the rest.
    for version in ("1", "v1"):
        page = served.get(
            "/api/v1/datasets/train/keys", params={"version": version, "limit": "100"}
        ).json()
        assert page == {"keys": sorted(KEYS[:20]), "next": None}, version
    latest = served.get("/api/v1/datasets/train/keys", params={"limit": "100"}).json()
    assert latest["keys"] == sorted(KEYS)
    r = served.get("/api/v1/datasets/train/keys", params={"version": "9"})
    assert r.status_code == 404 and r.json()["error"] == "VersionNotFoundError", r.text


def test_keys_refuses_a_bad_limit(served):
    for bad in ("0", "x", "10001"):
        r = served.get("/api/v1/datasets/train/keys", params={"limit": bad})
        assert r.status_code == 400, bad
        assert r.json()["error"] == "BadRequestError"


def test_sample_lists_entries_with_types_sizes_crcs_and_inlines_text(served):
    r = served.get(f"/api/v1/datasets/train/samples/{q('img/0003')}")
    assert r.status_code == 200
    doc = r.json()
    assert doc["key"] == "img/0003" and doc["dataset"] == "train"
    entries = {e["name"]: e for e in doc["entries"]}
    want = payload("img/0003")
    assert entries["jpg"]["content_type"] == "image/jpeg"
    assert entries["jpg"]["size"] == len(want["jpg"])
    assert entries["jpg"]["crc32c"] == f"{crc32c.crc32c(want['jpg']):08x}"
    assert "inline" not in entries["jpg"]
    assert entries["json"]["inline"] == want["json"]
    assert entries["txt"]["inline"] == want["txt"]
    assert "inline" not in entries["bin"]
    for e in doc["entries"]:
        body = served.get(e["href"]).content
        assert f"{crc32c.crc32c(body):08x}" == e["crc32c"]
        assert len(body) == e["size"]


def test_sample_at_a_version_and_missing_keys(served):
    r = served.get(f"/api/v1/datasets/train/samples/{q('img/0025')}", params={"version": "1"})
    assert r.status_code == 404
    assert r.json()["error"] == "KeyNotFoundError"
    assert "img/0025" in r.json()["message"]
    r = served.get(f"/api/v1/datasets/train/samples/{q('img/0025')}", params={"version": "2"})
    assert r.status_code == 200
    href = r.json()["entries"][0]["href"]
    assert href.endswith("?version=2")


def test_entry_bytes_with_content_type(served):
    want = payload("img/0004")
    base = f"/api/v1/datasets/train/samples/{q('img/0004')}/entries"
    r = served.get(f"{base}/jpg")
    assert r.status_code == 200
    assert r.content == want["jpg"]
    assert r.headers["content-type"] == "image/jpeg"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert served.get(f"{base}/bin").headers["content-type"] == "application/octet-stream"
    assert json.loads(served.get(f"{base}/json").content) == want["json"]
    r = served.get(f"{base}/png")
    assert r.status_code == 404
    assert r.json()["error"] == "EntryNotFoundError"
    assert "jpg" in r.json()["message"]


def test_batch_answers_in_request_order_with_a_status_per_key(served):
    keys = ["img/0009", "nope", "img/0001", "img/0009", "img/0029"]
    r = served.post("/api/v1/datasets/train/batch", json={"keys": keys})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert [(x["index"], x["key"], x["status"]) for x in lines] == [
        (0, "img/0009", "found"),
        (1, "nope", "not_found"),
        (2, "img/0001", "found"),
        (3, "img/0009", "found"),
        (4, "img/0029", "found"),
    ]
    assert lines[0]["sample"]["key"] == "img/0009"
    assert "sample" not in lines[1]


def test_batch_with_entries_version_and_data(served):
    body = {"keys": ["img/0002", "img/0025"], "entries": ["jpg"], "version": "v1", "data": True}
    lines = [
        json.loads(x)
        for x in served.post("/api/v1/datasets/train/batch", json=body).text.splitlines()
    ]
    assert [x["status"] for x in lines] == ["found", "not_found"]  # img/0025 came in version 2
    (entry,) = lines[0]["sample"]["entries"]
    assert entry["name"] == "jpg"
    assert base64.b64decode(entry["data"]) == payload("img/0002")["jpg"]


def test_batch_refuses_malformed_bodies(served):
    for body in (
        {"key": ["a"]},
        {"keys": "a"},
        {"keys": [1]},
        {"keys": ["a"], "entries": "jpg"},
        {"keys": ["a"], "version": True},
        {"keys": ["a"], "version": [1]},
    ):
        r = served.post("/api/v1/datasets/train/batch", json=body)
        assert r.status_code == 400, body
        assert r.json()["error"] == "BadRequestError"
    r = served.post("/api/v1/datasets/train/batch", content=b"{not json")
    assert r.status_code == 400


def test_sql_runs_read_only_queries(served):
    r = served.post(
        "/api/v1/sql", json={"query": "SELECT name FROM datasets ORDER BY name", "limit": 2}
    )
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["columns"] == ["name"]
    assert doc["rows"] == [{"name": "team/odd"}, {"name": "train"}]
    assert doc["truncated"] is True and doc["cut"] == "limit"


def test_sql_refuses_writes_with_a_json_error(served):
    for query in (
        "DELETE FROM datasets",
        "UPDATE datasets SET name = 'x'",
        "DROP TABLE records",
        "SELECT 1; DELETE FROM datasets",
    ):
        r = served.post("/api/v1/sql", json={"query": query})
        assert r.status_code == 400, (query, r.text)
        body = r.json()
        assert body["error"] in ("QueryRefusedError", "QueryError", "CatalogError"), body
        assert body["message"]
    names = served.post("/api/v1/sql", json={"query": "SELECT count(*) AS n FROM datasets"})
    assert names.json()["rows"] == [{"n": 3}]


def test_sql_errors_are_the_users(served):
    r = served.post("/api/v1/sql", json={"query": "SELECT nope FROM datasets"})
    assert r.status_code == 400
    assert r.json()["error"] == "QueryError"
    assert served.post("/api/v1/sql", json={"query": 5}).status_code == 400
    bad = served.post("/api/v1/sql", json={"query": "SELECT 1", "catalog": 5})
    assert bad.status_code == 400
    other = served.post("/api/v1/sql", json={"query": "SELECT 1", "catalog": "nope"})
    assert other.status_code == 404
    assert served.post("/api/v1/sql", json={"query": "SELECT 1", "limit": 0}).status_code == 400


def test_unknown_paths_and_methods_answer_json(served):
    r = served.get("/api/v1/nothing")
    assert r.status_code == 404 and r.json()["error"] == "NotFound"
    r = served.client.delete("/api/v1/datasets/train", headers=served.auth())
    assert r.status_code == 405 and r.json()["error"] == "MethodNotAllowed"
