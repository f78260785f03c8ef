"""A browser's session (``/api/v1/session``) and the page's routes, over HTTP (no browser).

The token goes into an HttpOnly, SameSite=Strict cookie that every endpoint
takes in place of the header, with the same checks: scope, expiry,
revocation. The page's documents carry no data and no token, and headers
that keep them from running anything but their own script.
"""

from __future__ import annotations

from typing import Any

from shardcat.serve import ServeConfig

from .conftest import client_for


def _cookie_header(response: Any) -> str:
    (value,) = response.headers.get_list("set-cookie")
    return str(value)


def test_a_valid_token_becomes_an_http_only_strict_cookie_the_api_accepts(served):
    client = served.client
    r = client.post("/api/v1/session", json={"token": served.train})
    assert r.status_code == 200, r.text
    assert r.json() == {
        "name": "train",
        "catalog": "main",
        "datasets": ["train"],
        "anonymous": False,
        "sql": False,  # the server runs SQL, but not for a token scoped to datasets
    }
    # Who the page is signed in as: the cookie alone says it.
    assert client.get("/api/v1/session").json()["name"] == "train"
    cookie = _cookie_header(r)
    assert cookie.startswith("shardcat_token=")
    for attribute in ("HttpOnly", "SameSite=strict", "Path=/"):
        assert attribute.lower() in cookie.lower(), cookie
    assert (
        "secure" not in cookie.lower()
    )  # plain HTTP on loopback: a Secure cookie would be dropped
    assert r.headers["cache-control"] == "no-store"

    # No header: the cookie is the token, with its scope.
    assert client.get("/api/v1/datasets/train/keys?limit=2").status_code == 200
    assert client.get("/api/v1/datasets/val/keys").status_code == 404  # out of scope: hidden
    # A header wins over the cookie.
    assert client.get("/api/v1/datasets/val/keys", headers=served.auth()).status_code == 200

    r = client.delete("/api/v1/session")
    assert r.status_code == 204
    assert 'shardcat_token=""' in _cookie_header(r) or "max-age=0" in _cookie_header(r).lower()
    client.cookies.clear()
    assert client.get("/api/v1/datasets/train/keys").status_code == 401
    assert client.get("/api/v1/session").status_code == 401


def test_who_am_i_says_what_the_page_may_offer(served, catalog_url):
    me = served.get("/api/v1/session").json()  # the full token, on a server with --sql
    assert me == {
        "name": "full",
        "catalog": "main",
        "datasets": None,
        "anonymous": False,
        "sql": True,
    }
    config = ServeConfig(catalogs=(("main", catalog_url),), allow_anonymous=True, rate_limit=0)
    with client_for(config) as client:
        assert client.get("/api/v1/session").json() == {
            "name": None,
            "catalog": None,
            "datasets": None,
            "anonymous": True,
            "sql": False,  # this server runs no SQL
        }


def test_a_bad_token_sets_no_cookie_and_says_why(served):
    for token, text in (
        ("not-a-token", "unknown token"),
        (served.expired, "expired"),
        (served.revoked, "revoked"),
    ):
        r = served.client.post("/api/v1/session", json={"token": token})
        assert r.status_code == 401, r.text
        assert text in r.json()["message"]
        assert r.headers.get_list("set-cookie") == []
    for body in ({}, {"token": ""}, {"token": 3}, ["x"]):
        r = served.client.post("/api/v1/session", json=body)
        assert r.status_code == 400 and r.json()["error"] == "BadRequestError", r.text
    r = served.client.post("/api/v1/session", content=b"{not json")
    assert r.status_code == 400


def test_a_cookie_of_a_token_revoked_later_is_refused(served, catalog_url):
    from shardcat.reading import Catalog
    from shardcat.serve.tokens import create_token, revoke

    with Catalog(catalog_url) as cat:
        token = create_token(cat, name="later").token
    client = served.client
    assert client.post("/api/v1/session", json={"token": token}).status_code == 200
    assert client.get("/api/v1/datasets").status_code == 200
    with Catalog(catalog_url) as cat:
        revoke(cat, "later")
    r = client.get("/api/v1/datasets")  # the server trusts rows for 0 s here
    assert r.status_code == 401 and "revoked" in r.json()["message"]


def test_behind_https_the_cookie_is_secure_and_scoped_to_the_root_path(catalog_url, root):
    from .conftest import make_catalog

    _, tokens = make_catalog(catalog_url, root)
    config = ServeConfig(catalogs=(("main", catalog_url),), root_path="/data", rate_limit=0)
    with client_for(config, base_url="https://testserver") as client:
        r = client.post("/data/api/v1/session", json={"token": tokens["full"]})
        assert r.status_code == 200, r.text
        cookie = _cookie_header(r).lower()
        assert "secure" in cookie and "path=/data/" in cookie


def test_the_page_is_served_with_its_own_headers_and_no_data(served):
    client = served.client
    r = client.get("/", follow_redirects=False)
    assert r.status_code == 308 and r.headers["location"] == "/ui/"
    for view in ("/ui/", "/ui/dataset?d=train", "/ui/sample?d=train&k=img%2F0001"):
        r = client.get(view)  # no token: the document holds no data
        assert r.status_code == 200, view
        assert r.headers["content-type"].startswith("text/html")
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert r.headers["x-content-type-options"] == "nosniff"
        assert "img/0001" not in r.text and "train" not in r.text
    for asset, kind in (("app.js", "javascript"), ("style.css", "text/css")):
        r = client.get(f"/ui/static/{asset}")
        assert r.status_code == 200 and kind in r.headers["content-type"], asset
    assert client.get("/ui/static/../app.py").status_code == 404
    assert client.get("/ui/static/%2e%2e/app.py").status_code == 404


def test_the_page_is_told_the_root_path_the_browser_must_use(catalog_url):
    # Behind a proxy that strips /data, this process sees /ui/; the browser must still call
    # /data/api/v1 (where the session cookie is scoped): the page is told, in a meta tag.
    config = ServeConfig(catalogs=(("main", catalog_url),), root_path="/data", page=True)
    with client_for(config) as client:
        for path in ("/ui/", "/data/ui/"):
            r = client.get(path)
            assert r.status_code == 200, path
            assert '<meta name="shardcat-root" content="/data">' in r.text
        assert client.get("/", follow_redirects=False).headers["location"] == "/data/ui/"
    with client_for(ServeConfig(catalogs=(("main", catalog_url),))) as client:
        assert '<meta name="shardcat-root" content="">' in client.get("/ui/").text


def test_a_server_started_without_the_page_has_only_the_api(catalog_url):
    config = ServeConfig(catalogs=(("main", catalog_url),), page=False)
    with client_for(config) as client:
        assert client.get("/ui/").status_code == 404
        assert client.get("/healthz").status_code == 200


def test_a_key_sent_with_a_bare_slash_is_told_to_encode_it(served):
    r = served.get("/api/v1/datasets/train/samples/img/0001")
    assert r.status_code == 404
    assert "%2F" in r.json()["hint"]
