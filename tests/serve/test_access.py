"""Who may read what: tokens (scope, expiry, revocation, kept hashed), anonymous access,
CORS, and the limits (batch size, response bytes, request rate)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from _forkrun import run_one
from shardcat.errors import BadRequestError, RateLimitedError
from shardcat.reading import Catalog
from shardcat.serve import ServeConfig, is_loopback
from shardcat.serve.limits import RateLimiter
from shardcat.serve.tokens import create_token, revoke

from .conftest import client_for, payload


def test_no_token_bad_scheme_and_unknown_tokens_are_401(served):
    for headers in (
        {},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer sct_not-a-token"},
        {"Authorization": "Bearer something-else"},
    ):
        r = served.client.get("/api/v1/datasets", headers=headers)
        assert r.status_code == 401, headers
        assert r.headers["www-authenticate"].startswith("Bearer")
        body = r.json()
        assert body["error"] == "AccessDeniedError"
        assert body["hint"]


def test_expired_and_revoked_tokens_are_401_with_a_json_error(served):
    for token, state in ((served.expired, "expired"), (served.revoked, "revoked")):
        r = served.get("/api/v1/datasets/train", token)
        assert r.status_code == 401
        assert r.json()["error"] == "AccessDeniedError"
        assert state in r.json()["message"]


def test_a_scoped_token_sees_its_datasets_and_404_for_the_rest(served):
    names = [d["name"] for d in served.get("/api/v1/datasets", served.train).json()["datasets"]]
    assert names == ["train"]
    assert served.get("/api/v1/datasets/train/keys", served.train).status_code == 200
    exists = served.get("/api/v1/datasets/val", served.train)
    missing = served.get("/api/v1/datasets/nope", served.train)
    assert exists.status_code == missing.status_code == 404
    # The same answer whether the dataset exists or not: nothing to tell them apart.
    assert exists.json()["message"].replace("val", "X") == missing.json()["message"].replace(
        "nope", "X"
    )
    for path in ("/versions", "/tags", "/keys", "/samples/v%2F0", "/samples/v%2F0/entries/jpg"):
        assert served.get(f"/api/v1/datasets/val{path}", served.train).status_code == 404, path
    r = served.post("/api/v1/datasets/val/batch", served.train, json={"keys": ["v/0"]})
    assert r.status_code == 404


def test_sql_needs_an_unscoped_token(served):
    r = served.post("/api/v1/sql", served.train, json={"query": "SELECT 1 AS x"})
    assert r.status_code == 403
    assert r.json()["error"] == "AccessDeniedError"
    assert served.post("/api/v1/sql", json={"query": "SELECT 1 AS x"}).json()["rows"] == [{"x": 1}]


def test_sql_is_off_unless_asked(catalog_url, root):
    from .conftest import make_catalog

    _, tokens = make_catalog(catalog_url, root)
    config = ServeConfig(catalogs=(("main", catalog_url),), token_cache_seconds=0)
    with client_for(config) as client:
        r = client.post(
            "/api/v1/sql",
            headers={"Authorization": f"Bearer {tokens['full']}"},
            json={"query": "SELECT 1"},
        )
        assert r.status_code == 403
        assert "--sql" in r.json()["hint"]


def test_tokens_are_kept_hashed_never_in_plain(served):
    engine = sa.create_engine(served.url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT * FROM api_tokens")).mappings().all()
    finally:
        engine.dispose()
    dump = json.dumps([dict(r) for r in rows], default=str)
    for token in (served.full, served.train, served.expired, served.revoked):
        assert token not in dump
        assert hashlib.sha256(token.encode()).hexdigest() in dump


def test_revocation_takes_effect_after_the_cache(catalog_url, root):
    from .conftest import make_catalog

    _, tokens = make_catalog(catalog_url, root)
    config = ServeConfig(catalogs=(("main", catalog_url),), token_cache_seconds=0)
    headers = {"Authorization": f"Bearer {tokens['train']}"}
    with client_for(config) as client:
        assert client.get("/api/v1/datasets/train", headers=headers).status_code == 200
        with Catalog(catalog_url) as cat:
            revoke(cat, "train")
        r = client.get("/api/v1/datasets/train", headers=headers)
        assert r.status_code == 401 and "revoked" in r.json()["message"]


def test_token_create_refuses_unknown_datasets_names_and_durations(served):
    with Catalog(served.url) as cat:
        with pytest.raises(KeyError):
            create_token(cat, datasets=["nope"])
        with pytest.raises(BadRequestError):
            create_token(cat, expires="soon")
        with pytest.raises(BadRequestError):
            create_token(cat, name="bad name")
        with pytest.raises(Exception, match="exists already"):
            create_token(cat, name="full")


# --- anonymous access ---------------------------------------------------------------------


def test_anonymous_access_is_refused_off_loopback():
    for host in ("0.0.0.0", "::", "192.168.1.5", "example.org"):
        assert not is_loopback(host)
        with pytest.raises(BadRequestError, match="refusing --allow-anonymous"):
            ServeConfig(catalogs=(("a", "sqlite://"),), host=host, allow_anonymous=True)
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"):
        assert is_loopback(host)
        ServeConfig(catalogs=(("a", "sqlite://"),), host=host, allow_anonymous=True)


def test_anonymous_on_loopback_reads_without_a_token_and_caches_publicly(catalog_url, root):
    from .conftest import make_catalog

    make_catalog(catalog_url, root)
    config = ServeConfig(catalogs=(("main", catalog_url),), allow_anonymous=True)
    with client_for(config) as client:
        assert client.get("/api/v1/datasets/val").status_code == 200
        r = client.get("/api/v1/datasets/train/samples/img%2F0001/entries/jpg?version=1")
        assert r.content == payload("img/0001")["jpg"]
        assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
        # A token sent to an anonymous server is still checked.
        bad = client.get("/api/v1/datasets", headers={"Authorization": "Bearer sct_x"})
        assert bad.status_code == 401


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SHARDCAT_CATALOG", "SHARDCAT_CONFIG")}
    env.update(COLUMNS="100", NO_COLOR="1")
    return run_one(*args, env=env, cwd=cwd, timeout=120)


def test_cli_refuses_anonymous_on_a_public_address(tmp_path, sqlite_url):
    with Catalog(sqlite_url):
        pass
    p = _cli("serve", "-c", sqlite_url, "--host", "0.0.0.0", "--allow-anonymous", cwd=tmp_path)
    assert p.returncode == 1
    assert "refusing --allow-anonymous" in p.stderr


def test_cli_token_create_list_revoke(tmp_path, catalog_url, root):
    from .conftest import make_catalog

    make_catalog(catalog_url, root)
    p = _cli(
        "serve", "token", "create", "-c", catalog_url, "--dataset", "train", "--dataset", "val",
        "--expires", "30d", "--name", "ci", cwd=tmp_path,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    token = p.stdout.strip()
    assert token.startswith("sct_") and len(token) > 40
    assert "shown this once" in p.stderr
    p = _cli("serve", "token", "list", "-c", catalog_url, "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    listed = {t["name"]: t for t in json.loads(p.stdout)}
    assert listed["ci"]["datasets"] == ["train", "val"]
    assert listed["ci"]["state"] == "active"
    assert listed["gone"]["state"] == "revoked"
    assert token not in p.stdout
    p = _cli("serve", "token", "revoke", "-c", catalog_url, "ci", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    with Catalog(catalog_url) as cat:
        from shardcat.serve.tokens import lookup_token

        row = lookup_token(cat, token)
        assert row is not None and row.state() == "revoked"
    p = _cli("serve", "token", "revoke", "-c", catalog_url, "nope", cwd=tmp_path)
    assert p.returncode == 1 and "no token named 'nope'" in p.stderr


def test_token_commands_and_other_commands_load_no_web_framework(tmp_path, sqlite_url):
    with Catalog(sqlite_url):
        pass
    probe = (
        "import sys\n"
        "from shardcat.cli.app import main\n"
        f"for args in (['serve', '--help'], ['serve', 'token', 'list', '-c', {sqlite_url!r}],"
        f" ['ls', '-c', {sqlite_url!r}]):\n"
        "    try:\n"
        "        main(args)\n"
        "    except SystemExit as e:\n"
        "        assert not e.code, e.code\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('starlette', 'uvicorn')))\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "[]"


# --- CORS ---------------------------------------------------------------------------------


def test_cors_is_off_unless_an_origin_is_given(served, catalog_url):
    r = served.get("/api/v1/datasets", headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in r.headers
    config = ServeConfig(
        catalogs=(("main", catalog_url),), cors_origins=("https://ok.example",), rate_limit=0
    )
    with client_for(config) as client:
        headers = {**served.auth(), "Origin": "https://ok.example"}
        r = client.get("/api/v1/datasets", headers=headers)
        assert r.headers["access-control-allow-origin"] == "https://ok.example"
        r = client.get("/api/v1/datasets", headers={**headers, "Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in r.headers
        pre = client.options(
            "/api/v1/datasets",
            headers={
                "Origin": "https://ok.example",
                "Access-Control-Request-Method": "GET",
                "Access-Control-Request-Headers": "authorization,range",
            },
        )
        assert pre.status_code == 200


# --- limits -------------------------------------------------------------------------------


def test_batch_size_limit_is_413(catalog_url, root):
    from .conftest import make_catalog

    _, tokens = make_catalog(catalog_url, root)
    config = ServeConfig(catalogs=(("main", catalog_url),), max_batch_keys=5, rate_limit=0)
    with client_for(config) as client:
        headers = {"Authorization": f"Bearer {tokens['full']}"}
        ok = client.post("/api/v1/datasets/train/batch", headers=headers, json={"keys": ["a"] * 5})
        assert ok.status_code == 200
        r = client.post("/api/v1/datasets/train/batch", headers=headers, json={"keys": ["a"] * 6})
        assert r.status_code == 413
        assert r.json()["error"] == "RequestTooLargeError"
        assert "serve_max_batch_keys" in r.json()["message"]
        big = b'{"keys": ["' + b"x" * (17 * 1024**2) + b'"]}'
        r = client.post("/api/v1/datasets/train/batch", headers=headers, content=big)
        assert r.status_code == 413


def test_response_bytes_limit_is_413_and_ranges_get_through(catalog_url, root):
    from .conftest import make_catalog

    _, tokens = make_catalog(catalog_url, root)
    config = ServeConfig(catalogs=(("main", catalog_url),), max_response_bytes=512, rate_limit=0)
    data = payload("img/0008")["jpg"]
    assert len(data) > 512
    with client_for(config) as client:
        headers = {"Authorization": f"Bearer {tokens['full']}"}
        url = "/api/v1/datasets/train/samples/img%2F0008/entries/jpg"
        r = client.get(url, headers=headers)
        assert r.status_code == 413
        assert "Range" in r.json()["message"]
        r = client.get(url, headers={**headers, "Range": "bytes=0-511"})
        assert r.status_code == 206 and r.content == data[:512]
        r = client.get(url, headers={**headers, "Range": "bytes=0-512"})
        assert r.status_code == 413
        # Revalidating costs no transfer: a 304 whatever the entry's size.
        etag = client.get(url, headers={**headers, "Range": "bytes=0-1"}).headers["etag"]
        assert client.get(url, headers={**headers, "If-None-Match": etag}).status_code == 304
        body = {"keys": ["img/0008"], "data": True}
        r = client.post("/api/v1/datasets/train/batch", headers=headers, json=body)
        assert r.status_code == 413


def test_rate_limit_is_429_with_retry_after(catalog_url, root):
    from .conftest import make_catalog

    _, tokens = make_catalog(catalog_url, root)
    config = ServeConfig(catalogs=(("main", catalog_url),), rate_limit=0.5, rate_burst=3)
    with client_for(config) as client:
        full = {"Authorization": f"Bearer {tokens['full']}"}
        train = {"Authorization": f"Bearer {tokens['train']}"}
        codes = [client.get("/api/v1/datasets", headers=full).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        r = client.get("/api/v1/datasets", headers=full)
        assert r.status_code == 429
        assert r.json()["error"] == "RateLimitedError"
        assert int(r.headers["retry-after"]) >= 1
        # Each token has a bucket of its own.
        assert client.get("/api/v1/datasets", headers=train).status_code == 200
        assert client.get("/healthz").status_code == 200  # health checks are never limited


def test_refused_tokens_are_rate_limited_by_address(catalog_url, root):
    from .conftest import make_catalog

    _, tokens = make_catalog(catalog_url, root)
    config = ServeConfig(catalogs=(("main", catalog_url),), rate_limit=0.5, rate_burst=3)
    with client_for(config) as client:
        codes = [
            client.get("/api/v1/datasets", headers={"Authorization": f"Bearer sct_guess{i}"})
            for i in range(5)
        ]
        assert [r.status_code for r in codes] == [401, 401, 401, 429, 429]
        # A valid token has a bucket of its own.
        ok = client.get("/api/v1/datasets", headers={"Authorization": f"Bearer {tokens['full']}"})
        assert ok.status_code == 200


def test_token_bucket_refills_at_its_rate():
    now = [0.0]
    limiter = RateLimiter(rate=2.0, burst=2, clock=lambda: now[0])
    limiter.take("a")
    limiter.take("a")
    with pytest.raises(RateLimitedError) as e:
        limiter.take("a")
    assert e.value.retry_after == pytest.approx(0.5)
    now[0] += 0.5
    limiter.take("a")
    with pytest.raises(RateLimitedError):
        limiter.take("a")
    limiter.take("b")
    RateLimiter(rate=0, burst=1).take("x")  # 0: no limit


# --- several catalogs ---------------------------------------------------------------------


def test_one_server_serves_several_catalogs_and_tokens_stay_in_their_own(
    catalog_url, root, tmp_path
):
    from .conftest import make_catalog, write

    _, tokens = make_catalog(catalog_url, root)
    other_url = f"sqlite:///{tmp_path / 'other.db'}"
    with Catalog(other_url) as cat:
        cat.create_dataset("train", f"{root}/other")
        write(cat, "train", f"{root}/other", ["o/1", "o/2"])
        other_token = create_token(cat, name="other").token
    config = ServeConfig(catalogs=(("main", catalog_url), ("other", other_url)), rate_limit=0)
    with client_for(config) as client:
        main = {"Authorization": f"Bearer {tokens['full']}"}
        other = {"Authorization": f"Bearer {other_token}"}
        listed = client.get("/api/v1/datasets", headers=main).json()["datasets"]
        assert {d["catalog"] for d in listed} == {"main"}
        listed = client.get("/api/v1/datasets", headers=other).json()["datasets"]
        assert [(d["catalog"], d["name"], d["record_count"]) for d in listed] == [
            ("other", "train", 2)
        ]
        # A token's catalog is the default of ?catalog=; another catalog is a 404.
        keys = client.get("/api/v1/datasets/train/keys", headers=other).json()["keys"]
        assert keys == ["o/1", "o/2"]
        r = client.get("/api/v1/datasets/train/keys?catalog=other", headers=main)
        assert r.status_code == 404
        r = client.get("/api/v1/datasets/train/keys?catalog=nope", headers=main)
        assert r.status_code == 404
        doc = client.get("/api/v1/datasets/train/samples/o%2F1", headers=other).json()
        assert doc["catalog"] == "other"
        assert all(e["href"].endswith("?catalog=other") for e in doc["entries"])
        assert client.get(doc["entries"][0]["href"], headers=other).status_code == 200


def test_head_asks_for_an_entrys_headers_only(served):
    url = "/api/v1/datasets/train/samples/img%2F0004/entries/jpg"
    r = served.client.head(url, headers=served.auth())
    assert r.status_code == 200
    assert r.content == b""
    assert int(r.headers["content-length"]) == len(payload("img/0004")["jpg"])
    assert r.headers["etag"] == served.get(url).headers["etag"]


def test_a_missing_extra_says_what_to_install(monkeypatch):
    import shardcat.serve
    from shardcat.errors import ExtraNotInstalledError

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # what an install without it imports
    with pytest.raises(ExtraNotInstalledError, match=r"pip install 'shardcat\[serve\]'"):
        shardcat.serve.require_extra()
