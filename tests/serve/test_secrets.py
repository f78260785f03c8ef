"""No store path, catalog URL or secret in any response: a crawl of every endpoint, its
errors included, with the datasets written under a folder whose name is a marker."""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import quote

from .conftest import HOSTILE, KEYS, MARKER


def q(text: str) -> str:
    return quote(text, safe="")


def _crawl(served) -> list[tuple[str, int, str]]:
    """(what, status, headers and body) of a request to every endpoint, successes and errors."""
    seen: list[tuple[str, int, str]] = []

    def keep(what: str, r) -> None:
        seen.append((what, r.status_code, json.dumps(dict(r.headers)) + r.text))

    for token in (served.full, served.train, served.expired, "sct_nope", None):
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        keep("health", served.client.get("/healthz"))
        keep("openapi", served.client.get("/api/v1/openapi.json"))
        keep("list", served.client.get("/api/v1/datasets", headers=auth))
        keep("list bad", served.client.get("/api/v1/datasets?catalog=nope", headers=auth))
        for ds in ("train", "val", "team/odd", "nope"):
            base = f"/api/v1/datasets/{q(ds)}"
            for tail in ("", "/versions", "/tags", "/keys?limit=100", "?version=99", "?version=x"):
                keep(ds + tail, served.client.get(base + tail, headers=auth))
            for key in (KEYS[0], "v/0", HOSTILE[1], "missing"):
                sample = f"{base}/samples/{q(key)}"
                keep(sample, served.client.get(sample, headers=auth))
                for entry in ("jpg", "txt", "nope"):
                    keep(entry, served.client.get(f"{sample}/entries/{entry}", headers=auth))
            r = served.client.post(
                f"{base}/batch", headers=auth, json={"keys": [KEYS[0], "v/0", "missing"]}
            )
            keep(ds + " batch", r)
        for query in (
            "SELECT * FROM datasets",
            "SELECT * FROM shards",
            "SELECT * FROM jobs",
            "SELECT nope FROM nowhere",
            "DELETE FROM shards",
        ):
            keep(query, served.client.post("/api/v1/sql", headers=auth, json={"query": query}))
    return seen


def test_no_response_names_a_store_path_or_the_catalog(served, root):
    crawl = _crawl(served)
    assert len(crawl) > 300
    statuses = {status for _, status, _ in crawl}
    assert {200, 400, 401, 403, 404} <= statuses
    catalog_path = served.url.split("///")[-1].split("?")[0]
    folder = str(Path(root).parent)
    for what, status, text in crawl:
        assert MARKER not in text, (what, status, text[:500])
        assert folder not in text, (what, status)
        if catalog_path and "/" in catalog_path:
            assert catalog_path not in text, (what, status)
    # The SQL answers had the paths, scrubbed.
    shards = [t for w, s, t in crawl if w == "SELECT * FROM shards" and s == 200]
    assert shards and all("<hidden>" in t for t in shards)


def test_a_store_failure_says_what_failed_and_no_path(served, root):
    # The shard of val is gone: the catalog names a file the store does not have.
    for name in os.listdir(f"{root}/val"):
        if name.endswith(".shard"):
            os.remove(f"{root}/val/{name}")
    for path in (
        "/api/v1/datasets/val/samples/v%2F0",
        "/api/v1/datasets/val/samples/v%2F0/entries/jpg",
    ):
        r = served.get(path)
        assert r.status_code == 502
        body = r.json()
        assert body["error"] == "ShardNotFoundError"
        assert MARKER not in r.text and root not in r.text
        assert "log" in body["message"]
    r = served.post("/api/v1/datasets/val/batch", json={"keys": ["v/0"]})
    assert r.status_code == 502 and MARKER not in r.text


def test_sql_cannot_read_the_sqlite_catalogs_file_path(tmp_path):
    from shardcat.reading import Catalog
    from shardcat.serve import ServeConfig

    from .conftest import MARKER, client_for

    folder = tmp_path / f"cat-{MARKER}"
    folder.mkdir()
    url = f"sqlite:///{folder / 'catalog.db'}"
    Catalog(url).close()
    config = ServeConfig(catalogs=(("main", url),), allow_anonymous=True, rate_limit=0, sql=True)
    with client_for(config) as client:
        r = client.post("/api/v1/sql", json={"query": "SELECT file FROM pragma_database_list"})
        assert r.status_code == 200, r.text
        assert MARKER not in r.text and "<hidden>" in r.text
