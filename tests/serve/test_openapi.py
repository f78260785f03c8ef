"""docs/openapi.json is the app's OpenAPI document, and it lists exactly the app's routes."""

from __future__ import annotations

import json
from pathlib import Path

from starlette.routing import Route

from shardcat.serve import ServeConfig, create_app
from shardcat.serve.openapi import openapi_spec

DOC = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def test_the_committed_document_is_the_apps():
    assert json.loads(DOC.read_text()) == openapi_spec(), (
        "regenerate it: python -m shardcat.serve.openapi > docs/openapi.json"
    )


def test_the_document_lists_exactly_the_routes_and_methods():
    # The API's routes: the page's (/ and /ui/, HTML for a browser) are not part of it.
    app = create_app(ServeConfig(catalogs=(("main", "sqlite://"),), page=False))
    routes = {
        (route.path, method.lower())
        for route in app.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"
    }
    documented = {
        (path, method) for path, item in openapi_spec()["paths"].items() for method in item
    }
    assert routes == documented


def test_every_reference_resolves():
    spec = openapi_spec()
    text = json.dumps(spec)
    for ref in {part.split('"')[0] for part in text.split('"$ref": "#/')[1:]}:
        node = spec
        for name in ref.split("/"):
            node = node[name]
        assert node, ref


def test_the_app_serves_it_without_a_token(served):
    r = served.client.get("/api/v1/openapi.json")
    assert r.status_code == 200
    assert r.json() == openapi_spec()
