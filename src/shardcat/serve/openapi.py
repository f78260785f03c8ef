"""The OpenAPI 3.1 document of ``shardcat serve``'s API, served at ``/api/v1/openapi.json``.

Written out here, next to the routes it describes: ``docs/openapi.json`` is
this document (``python -m shardcat.serve.openapi > docs/openapi.json``),
and tests/serve/test_openapi.py checks that the file is current and that
its paths and methods are exactly the app's routes.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["openapi_spec"]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _param(name: str, where: str, description: str, **schema: Any) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": where == "path",
        "description": description,
        "schema": schema or {"type": "string"},
    }


_ERR = {
    "400": {"$ref": "#/components/responses/BadRequest"},
    "401": {"$ref": "#/components/responses/Unauthorized"},
    "404": {"$ref": "#/components/responses/NotFound"},
    "429": {"$ref": "#/components/responses/RateLimited"},
}

_CATALOG = _param(
    "catalog", "query", "The catalog's name (default: the token's catalog, else the first)."
)
_DATASET = _param("dataset", "path", "The dataset's name, percent-encoded as one segment.")
_KEY = _param("key", "path", "The sample's key, percent-encoded as one segment ('/' as %2F).")
_ENTRY = _param("entry", "path", "The entry's name, percent-encoded as one segment.")
_VERSION = _param(
    "version", "query", "A kept version's number or a tag (default: the latest version)."
)


def _get(summary: str, params: list[dict[str, Any]], ok: dict[str, Any]) -> dict[str, Any]:
    return {"get": {"summary": summary, "parameters": params, "responses": {"200": ok, **_ERR}}}


def _schemas() -> dict[str, Any]:
    string, integer = {"type": "string"}, {"type": "integer"}
    nullable_string = {"type": ["string", "null"]}
    tags = {"type": "object", "additionalProperties": integer}
    return {
        "Error": {
            "type": "object",
            "required": ["error", "message"],
            "properties": {
                "error": {**string, "description": "The shardcat error's type name."},
                "message": string,
                "hint": {**nullable_string, "description": "What to do about it."},
            },
        },
        "Dataset": {
            "type": "object",
            "properties": {
                "catalog": string,
                "name": string,
                "version": integer,
                "record_count": integer,
                "shard_count": integer,
                "size_bytes": integer,
                "tags": tags,
                "created_at": nullable_string,
            },
        },
        "DatasetInfo": {
            "type": "object",
            "properties": {
                "catalog": string,
                "name": string,
                "version": integer,
                "stats_version": {**integer, "description": "The version the counts are of."},
                "created_at": nullable_string,
                "record_count": integer,
                "shard_count": integer,
                "size_bytes": integer,
                "hidden_records": integer,
                "entry_kinds": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": string,
                            "content_type": string,
                            "codec": string,
                            "record_count": integer,
                        },
                    },
                },
                "fields": {"type": "object", "additionalProperties": string},
                "tags": tags,
            },
        },
        "Version": {
            "type": "object",
            "properties": {
                "number": integer,
                "created_at": nullable_string,
                "operation": string,
                "records_added": integer,
                "records_removed": integer,
                "bytes_added": integer,
                "bytes_removed": integer,
                "message": nullable_string,
                "total_records": integer,
                "total_bytes": integer,
                "tags": {"type": "array", "items": string},
            },
        },
        "Entry": {
            "type": "object",
            "properties": {
                "name": string,
                "content_type": string,
                "size": integer,
                "crc32c": {**string, "description": "CRC32C of the bytes, 8 hex digits."},
                "href": {**string, "description": "The URL path of the entry's bytes."},
                "inline": {"description": "The value of a text or JSON entry up to 64 KiB."},
                "data": {**string, "description": "The bytes, base64 (batch with data: true)."},
            },
        },
        "Sample": {
            "type": "object",
            "properties": {
                "catalog": string,
                "dataset": string,
                "key": string,
                "version": {"type": ["integer", "string", "null"]},
                "entries": {"type": "array", "items": _ref("Entry")},
            },
        },
        "Session": {
            "type": "object",
            "description": "Who the caller is: a token's name and scope, or anonymous.",
            "properties": {
                "name": {"type": ["string", "null"]},
                "catalog": {"type": ["string", "null"]},
                "datasets": {"type": ["array", "null"], "items": {"type": "string"}},
                "anonymous": {"type": "boolean"},
                "sql": {"type": "boolean", "description": "Whether it may run POST /api/v1/sql."},
            },
        },
        "BatchLine": {
            "type": "object",
            "required": ["index", "key", "status"],
            "properties": {
                "index": integer,
                "key": string,
                "status": {"enum": ["found", "not_found", "error"]},
                "sample": _ref("Sample"),
                "error": _ref("Error"),
            },
        },
    }


def openapi_spec() -> dict[str, Any]:
    """The API's OpenAPI document (a new dict each call)."""
    ds = "/api/v1/datasets/{dataset}"
    error = {"content": {"application/json": {"schema": _ref("Error")}}}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "shardcat serve",
            # The API's version (the /api/v1 of the paths), not shardcat's: the file changes
            # when the API does.
            "version": "1",
            "description": "Read-only access to shardcat datasets over HTTP (docs/SERVE.md). "
            "Every /api/v1 request needs 'Authorization: Bearer <token>' unless the server "
            "allows anonymous access on a loopback address.",
        },
        "security": [{"bearer": []}],
        "paths": {
            "/healthz": {
                "get": {
                    "summary": "Liveness (no token).",
                    "security": [],
                    "responses": {"200": _json({"type": "object"}, '{"status": "ok"}')},
                }
            },
            "/api/v1/openapi.json": {
                "get": {
                    "summary": "This document (no token).",
                    "security": [],
                    "responses": {"200": _json({"type": "object"}, "The OpenAPI document.")},
                }
            },
            "/api/v1/datasets": _get(
                "The datasets the token may read, per catalog.",
                [_CATALOG],
                _json(
                    {
                        "type": "object",
                        "properties": {"datasets": {"type": "array", "items": _ref("Dataset")}},
                    },
                    "The datasets.",
                ),
            ),
            ds: _get(
                "A dataset: version, counts, sizes, entry kinds, fields, tags.",
                [_DATASET, _CATALOG, _VERSION],
                _json(_ref("DatasetInfo"), "The dataset."),
            ),
            ds + "/versions": _get(
                "The kept versions, newest first.",
                [_DATASET, _CATALOG],
                _json(
                    {
                        "type": "object",
                        "properties": {"versions": {"type": "array", "items": _ref("Version")}},
                    },
                    "The versions.",
                ),
            ),
            ds + "/tags": _get(
                "The tags: name -> version.",
                [_DATASET, _CATALOG],
                _json(
                    {
                        "type": "object",
                        "properties": {
                            "tags": {"type": "object", "additionalProperties": {"type": "integer"}}
                        },
                    },
                    "The tags.",
                ),
            ),
            ds + "/keys": _get(
                "A page of keys in byte order, from the key index (no OFFSET).",
                [
                    _DATASET,
                    _CATALOG,
                    _param("prefix", "query", "Only keys starting with it."),
                    _param("after", "query", "Only keys after it: the previous page's next."),
                    _param(
                        "limit", "query", "Keys per page.", type="integer", minimum=1, maximum=10000
                    ),
                    _VERSION,
                ],
                _json(
                    {
                        "type": "object",
                        "properties": {
                            "keys": {"type": "array", "items": {"type": "string"}},
                            "next": {
                                "type": ["string", "null"],
                                "description": "Pass as after= for the next page; null: last.",
                            },
                        },
                    },
                    "A page of keys.",
                ),
            ),
            ds + "/samples/{key}": _get(
                "A sample: its entries' types, sizes and CRCs; small text and JSON inline.",
                [_DATASET, _KEY, _CATALOG, _VERSION],
                _json(_ref("Sample"), "The sample."),
            ),
            ds + "/samples/{key}/entries/{entry}": {
                "get": {
                    "summary": "An entry's bytes: ETag (CRC32C), If-None-Match, Range, caching.",
                    "parameters": [
                        _DATASET,
                        _KEY,
                        _ENTRY,
                        _CATALOG,
                        _VERSION,
                        _param("Range", "header", "One byte range: bytes=a-b, a- or -n."),
                        _param("If-None-Match", "header", "An ETag: 304 when it matches."),
                    ],
                    "responses": {
                        "200": {
                            "description": "The bytes, with their content type.",
                            "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
                        },
                        "206": {"description": "The range asked for (Content-Range)."},
                        "304": {"description": "Not modified (If-None-Match)."},
                        "413": {"$ref": "#/components/responses/TooLarge"},
                        "416": {"description": "The range starts past the end."},
                        **_ERR,
                    },
                }
            },
            ds + "/batch": {
                "post": {
                    "summary": "Many samples: one catalog query, NDJSON in request order.",
                    "parameters": [_DATASET, _CATALOG],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["keys"],
                                    "properties": {
                                        "keys": {"type": "array", "items": {"type": "string"}},
                                        "entries": {"type": "array", "items": {"type": "string"}},
                                        "version": {"type": ["integer", "string"]},
                                        "data": {"type": "boolean", "default": False},
                                    },
                                }
                            }
                        },
                    },
                    "responses": {
                        "200": {
                            "description": "One line per key, in the order asked.",
                            "content": {"application/x-ndjson": {"schema": _ref("BatchLine")}},
                        },
                        "413": {"$ref": "#/components/responses/TooLarge"},
                        **_ERR,
                    },
                }
            },
            "/api/v1/sql": {
                "post": {
                    "summary": "A read-only SQL query (shardcat sql's runner); with --sql only.",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["query"],
                                    "properties": {
                                        "query": {"type": "string"},
                                        "limit": {"type": "integer", "minimum": 1},
                                        "catalog": {"type": "string"},
                                    },
                                }
                            }
                        },
                    },
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "catalog": {"type": "string"},
                                    "columns": {"type": "array", "items": {"type": "string"}},
                                    "rows": {"type": "array", "items": {"type": "object"}},
                                    "truncated": {"type": "boolean"},
                                    "cut": {"type": ["string", "null"]},
                                    "limit": {"type": "integer"},
                                    "max_bytes": {"type": "integer"},
                                },
                            },
                            "The rows.",
                        ),
                        "403": {"$ref": "#/components/responses/Forbidden"},
                        "413": {"$ref": "#/components/responses/TooLarge"},
                        "504": {"description": "The query ran past its timeout.", **error},
                        **_ERR,
                    },
                }
            },
            "/api/v1/session": {
                "get": {
                    "summary": "Who the caller is (header or session cookie), and whether it "
                    "may run SQL.",
                    "responses": {
                        "200": _json(
                            _ref("Session"),
                            "The caller.",
                        ),
                        **_ERR,
                    },
                },
                "post": {
                    "summary": "A browser's session: the token checked, then kept in an HttpOnly, "
                    "SameSite=Strict cookie that every endpoint accepts in place of the header.",
                    "security": [],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["token"],
                                    "properties": {"token": {"type": "string"}},
                                }
                            }
                        },
                    },
                    "responses": {
                        "200": _json(
                            _ref("Session"),
                            "The token's name and scope (as GET); Set-Cookie holds it.",
                        ),
                        **_ERR,
                    },
                },
                "delete": {
                    "summary": "End the browser's session (the cookie is removed).",
                    "security": [],
                    "responses": {"204": {"description": "The cookie is removed."}},
                },
            },
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": _schemas(),
            "responses": {
                "BadRequest": {"description": "A malformed request.", **error},
                "Unauthorized": {"description": "No token, or not a valid one.", **error},
                "Forbidden": {"description": "Not with this token or server.", **error},
                "NotFound": {
                    "description": "No such dataset (or not for this token), version, key "
                    "or entry.",
                    **error,
                },
                "TooLarge": {"description": "Over a limit of the server.", **error},
                "RateLimited": {"description": "Too many requests: see Retry-After.", **error},
            },
        },
    }


if __name__ == "__main__":
    print(json.dumps(openapi_spec(), indent=2, sort_keys=True))
