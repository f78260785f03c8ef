"""The endpoints of ``/api/v1``: each parses its request, asks the catalog, and encodes the answer.

Path parameters (a catalog's datasets, keys, entry names) are one path
segment each, percent-encoded: ``/api/v1/datasets/train/samples/cam3%2F000412``.
The app routes on the raw path (:class:`.app.RawPathRouting`), so ``%2F``
never splits a segment, and :func:`segment` decodes each exactly once
(strict UTF-8). Catalog and storage calls block: every handler's work runs in
a worker thread (:func:`endpoint`), after the caller was authenticated and
counted against the rate limit.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import quote, unquote_to_bytes, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..catalog.history import Version
from ..catalog.readonly import run_read_only
from ..catalog.results import DescribedBatch, EntryInfo
from ..errors import (
    AccessDeniedError,
    BadRequestError,
    EntryNotFoundError,
    Hint,
    RequestTooLargeError,
    ShardcatError,
)
from ..reading import Catalog, Dataset
from .auth import COOKIE, Authenticator, bearer
from .catalogs import Catalogs, Principal, parse_version
from .config import ServeConfig
from .encoding import (
    INLINE_MAX,
    content_type_of,
    dataset_json,
    dumps,
    error_body,
    error_status,
    etag_of,
    json_cell,
    sample_json,
    version_json,
    wants_bytes,
)
from .entries import ByteSpan, entry_response, if_none_match, not_modified
from .limits import RateLimiter, check_batch, check_bytes

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_KEYS_PAGE",
    "JsonBody",
    "Services",
    "endpoint",
    "read_body",
    "segment",
]

MAX_KEYS_PAGE = 10_000
"""The largest ``limit`` of a keys page."""
MAX_BODY_BYTES = 16 * 1024**2
"""The largest request body (a batch's keys, a SQL query)."""
NDJSON = "application/x-ndjson"
_log = logging.getLogger("shardcat.serve")


class JsonBody(Response):
    """A JSON response rendered by :func:`.encoding.dumps` (UTF-8, compact)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumps(content)


class Services:
    """What the handlers share: the configuration, the catalogs, authentication and the rate."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.catalogs = Catalogs(config)
        self.auth = Authenticator(
            self.catalogs,
            anonymous=config.allow_anonymous,
            cache_seconds=config.token_cache_seconds,
        )
        self.rate = RateLimiter(config.rate_limit, config.rate_burst)

    def error(self, error: BaseException) -> Response:
        """The JSON error response for ``error`` (its text scrubbed of store locations)."""
        status = error_status(error)
        if status >= 500:
            # The answer says only what failed; the message (paths included) is for the operator.
            _log.error("%s", error, exc_info=error)
        headers = {}
        if status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="shardcat"'
        retry = getattr(error, "retry_after", None)
        if status == 429 and retry is not None:
            headers["Retry-After"] = str(max(1, int(retry + 0.999)))
        return JsonBody(error_body(error, self.catalogs.scrub), status_code=status, headers=headers)

    def principal(self, request: Request) -> Principal:
        """Who sent ``request`` (blocking: catalog queries), counted against the rate limit."""
        client = request.client.host if request.client else "unknown"
        header = bearer(request.headers.get("authorization"), request.cookies.get(COOKIE))
        try:
            who = self.auth.principal(header, client)
        except AccessDeniedError:
            # Refused tokens count too, per address: guessing costs a query per catalog.
            self.rate.take(f"refused:{client}")
            raise
        self.rate.take(who.caller)
        return who


Handler = Callable[[Request, Services, Principal], Response]


def endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """An ASGI endpoint running ``handler`` in a worker thread, after authentication.

    Every error becomes a JSON error response: a ShardcatError with its
    status (:func:`.encoding.error_status`), anything else a 500 whose
    message stays in the log.
    """

    async def run(request: Request) -> Response:
        services: Services = request.app.state.services
        if request.method == "POST":
            try:
                request.state.body = await read_body(request)
            except ShardcatError as e:
                return services.error(e)

        def call() -> Response:
            who = services.principal(request)
            return handler(request, services, who)

        try:
            return await run_in_threadpool(call)
        except ShardcatError as e:
            return services.error(e)

    run.__name__ = handler.__name__
    run.__doc__ = handler.__doc__
    return run


async def read_body(request: Request) -> bytes:
    """The body, refused past :data:`MAX_BODY_BYTES` (before reading it, when its length is sent).

    Raises
    ------
    RequestTooLargeError
        If the body is larger.
    """
    length = request.headers.get("content-length", "")
    too_big = RequestTooLargeError(
        f"the request body is over {MAX_BODY_BYTES} bytes: send fewer keys per request"
    )
    if length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise too_big
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise too_big
        chunks.append(chunk)
    return b"".join(chunks)


def segment(request: Request, name: str) -> str:
    """The path parameter ``name``, percent-decoded once (strict UTF-8).

    Raises
    ------
    BadRequestError
        If its bytes are not UTF-8.
    """
    raw: str = request.path_params[name]
    try:
        return unquote_to_bytes(raw.encode("latin-1")).decode("utf-8")
    except (UnicodeDecodeError, UnicodeEncodeError):
        raise BadRequestError(
            f"the path's {name} is not percent-encoded UTF-8 text (encodeURIComponent)"
        ) from None


def _query(request: Request, name: str) -> str | None:
    return request.query_params.get(name)


def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
    value = _query(request, name)
    if value is None or value == "":
        return default
    try:
        n = int(value)
    except ValueError:
        raise BadRequestError(f"{name} must be a whole number, not {value[:40]!r}") from None
    if not low <= n <= high:
        raise BadRequestError(f"{name} must be between {low} and {high}, not {n}")
    return n


def _dataset(request: Request, services: Services, who: Principal) -> tuple[str, Dataset]:
    """The catalog's name and the dataset's handle (a query: for the dataset's documents)."""
    catalog = services.catalogs.choose(who, _query(request, "catalog"))
    return catalog, services.catalogs.dataset(who, catalog, segment(request, "dataset"))


def _reader(request: Request, services: Services, who: Principal) -> tuple[str, Catalog, str]:
    """The catalog's name, the catalog and the dataset's name, with no query: for lookups,
    which check the dataset themselves (inside :meth:`.Catalogs.hiding`)."""
    catalog = services.catalogs.choose(who, _query(request, "catalog"))
    name = segment(request, "dataset")
    return catalog, services.catalogs.reader(who, catalog, name), name


def _href(
    request: Request, catalog: str, dataset: str, key: str, version: Version
) -> Callable[[str], str]:
    """The URL path of each entry of a sample (under the app's root path)."""
    base = (
        f"{request.scope.get('root_path', '')}/api/v1/datasets/{quote(dataset, safe='')}"
        f"/samples/{quote(key, safe='')}/entries/"
    )
    params = {}
    if version is not None:
        params["version"] = str(version)
    if catalog != request.app.state.services.catalogs.default:
        params["catalog"] = catalog
    tail = f"?{urlencode(params)}" if params else ""
    return lambda entry: base + quote(entry, safe="") + tail


def _tags(ds: Dataset) -> dict[str, int]:
    return {tag: v.number for v in ds.log() for tag in v.tags}


# --- handlers ------------------------------------------------------------------------------


def list_datasets(request: Request, services: Services, who: Principal) -> Response:
    """Every dataset the caller may read: name, version, counts, size and tags, per catalog."""
    asked = _query(request, "catalog")
    names = [services.catalogs.choose(who, asked)] if asked else services.catalogs.names
    out = []
    for name in names:
        if not who.sees_catalog(name):
            continue
        cat = services.catalogs.get(name)
        versions = {info.name: info.version for info in cat.datasets()}
        for summary in cat.dataset_summaries():
            if not who.sees(name, summary.name):
                continue
            ds = cat.dataset(summary.name)
            out.append(dataset_json(name, summary, versions.get(summary.name, 0), _tags(ds)))
    return JsonBody({"datasets": out})


def dataset_info(request: Request, services: Services, who: Principal) -> Response:
    """A dataset: its version, counts, sizes, entry kinds, fields and tags (at ``?version=``)."""
    catalog, ds = _dataset(request, services, who)
    version = parse_version(_query(request, "version"))
    stats = ds.stats(version=version)
    return JsonBody(
        {
            "catalog": catalog,
            "name": ds.name,
            "version": stats.info.version,
            "stats_version": stats.version,
            "created_at": json_cell(stats.info.created_at),
            "record_count": stats.record_count,
            "shard_count": len(stats.shards),
            "size_bytes": stats.size_bytes,
            "hidden_records": stats.hidden_records,
            "entry_kinds": [
                {
                    "name": k.name,
                    "content_type": content_type_of(k.name, k.content_type),
                    "codec": k.codec,
                    "record_count": k.record_count,
                }
                for k in stats.entry_kinds
            ],
            "fields": ds.fields(),
            "tags": _tags(ds),
        }
    )


def dataset_versions(request: Request, services: Services, who: Principal) -> Response:
    """The dataset's kept versions, newest first (``shardcat log``)."""
    _, ds = _dataset(request, services, who)
    return JsonBody({"versions": [version_json(v) for v in ds.log()]})


def dataset_tags(request: Request, services: Services, who: Principal) -> Response:
    """The dataset's tags: name -> version number."""
    _, ds = _dataset(request, services, who)
    return JsonBody({"tags": dict(sorted(_tags(ds).items()))})


def dataset_keys(request: Request, services: Services, who: Principal) -> Response:
    """A page of keys in byte order: ``?prefix=``, ``?after=`` (the previous ``next``),
    ``?limit=``, ``?version=`` (a kept version's keys; default the latest's)."""
    _, cat, name = _reader(request, services, who)
    limit = _int(request, "limit", 100, 1, MAX_KEYS_PAGE)
    prefix = _query(request, "prefix") or None
    after = _query(request, "after") or None
    version = parse_version(_query(request, "version"))
    # One more than the page: whether there is a next page is known without another query.
    with services.catalogs.hiding(name):
        keys = list(cat.keys(name, prefix=prefix, after=after, limit=limit + 1, version=version))
    more = len(keys) > limit
    keys = keys[:limit]
    return JsonBody({"keys": keys, "next": keys[-1] if more else None})


def sample(request: Request, services: Services, who: Principal) -> Response:
    """A sample as JSON: its entries' names, types, sizes and CRCs, small text and JSON inline."""
    catalog, cat, name = _reader(request, services, who)
    key = segment(request, "key")
    version = parse_version(_query(request, "version"))
    with services.catalogs.hiding(name):
        # The row says what the sample holds; only the entries to inline (and compressed
        # ones, whose size once read it does not hold) are read: never its video.
        described = cat.describe(name, key, version=version)
        wanted = [i.name for i in described if wants_bytes(i)]
        record = cat.get(name, key, wanted, version=version)
    href = _href(request, catalog, name, key, version)
    return JsonBody(sample_json(catalog, name, record, version, href, described=described))


def entry(request: Request, services: Services, who: Principal) -> Response:
    """An entry's bytes, with its content type, ETag, ``Range`` and caching (:mod:`.entries`)."""
    _, cat, dataset = _reader(request, services, who)
    key, name = segment(request, "key"), segment(request, "entry")
    version = parse_version(_query(request, "version"))
    headers = request.headers
    with services.catalogs.hiding(dataset):
        described = {i.name: i for i in cat.describe(dataset, key, version=version)}
        info = described.get(name)
        if info is None:
            raise EntryNotFoundError(name, key=key, names=tuple(described))
        # The validator is the row's: a revalidation (304) reads no byte of the shard.
        etag = etag_of(info.crc32c, info.size)
        if if_none_match(headers.get("if-none-match"), etag):
            return not_modified(etag, pinned=isinstance(version, int), private=private(services))

        def whole() -> memoryview:
            # Only this entry's bytes are read (CRC-checked): a thumbnail does not cost its
            # sample's video.
            return cat.get(dataset, key, [name], version=version)[name].view

        if info.codec == "none":
            # Its stored bytes are its bytes: a range is read alone (a seek in a video).
            def read(span: ByteSpan | None) -> memoryview:
                if span is None or span.end - span.start >= info.size:
                    return whole()
                return cat.read_part(dataset, key, name, span.start, span.end, version=version)

            size = info.size
        else:
            data = whole()  # decoded to learn its size; a range is a slice of it

            def read(span: ByteSpan | None) -> memoryview:
                return data if span is None else data[span.start : span.end]

            size = data.nbytes
        return entry_response(
            size,
            read,
            content_type_of(name, info.content_type),
            etag,
            pinned=isinstance(version, int),
            private=private(services),
            range_header=headers.get("range"),
            if_range=headers.get("if-range"),
            max_bytes=services.config.max_response_bytes,
            what=f"entry {name!r}",
        )


def private(services: Services) -> bool:
    """Whether answers are for one caller only (tokens required): ``Cache-Control: private``."""
    return not services.config.allow_anonymous


def _body(request: Request) -> Any:
    """The request's JSON body (read by :func:`endpoint`, at most :data:`MAX_BODY_BYTES`)."""
    raw: bytes = request.state.body
    try:
        return json.loads(raw)
    except ValueError as e:
        raise BadRequestError(f"the request body is not JSON: {e}") from None


def batch(request: Request, services: Services, who: Principal) -> Response:
    """Many samples in one request: one catalog query, results streamed in request order.

    Body ``{"keys": [...], "entries": [...], "version": N|tag, "data": false}``;
    the answer is NDJSON, one line per key in the order asked:
    ``{"index", "key", "status": "found"|"not_found", "sample": {...}}``.
    """
    catalog, cat, name = _reader(request, services, who)
    body = _body(request)
    if not isinstance(body, dict) or not isinstance(body.get("keys"), list):
        raise BadRequestError('the body must be {"keys": [...]} (with "entries", "version")')
    keys = body["keys"]
    check_batch(len(keys), services.config.max_batch_keys)
    if not all(isinstance(k, str) for k in keys):
        raise BadRequestError("every key must be a string")
    entries = body.get("entries")
    if entries is not None and (
        not isinstance(entries, list) or not all(isinstance(n, str) for n in entries)
    ):
        raise BadRequestError("entries must be a list of entry names")
    raw_version = body.get("version")
    if raw_version is not None and (
        not isinstance(raw_version, (int, str)) or isinstance(raw_version, bool)
    ):
        raise BadRequestError("version must be a number or a tag")
    version = parse_version(None if raw_version is None else str(raw_version))
    data = body.get("data", False) is True
    picked = None if entries is None else frozenset(entries)

    def want(info: EntryInfo) -> bool:
        # With the bytes asked for ("data"), every entry asked for; else only what the
        # document inlines (small text and JSON; compressed entries, for their size): a page
        # of samples lists its videos, it does not read them.
        if picked is not None and info.name not in picked:
            return False
        return data or wants_bytes(info)

    with services.catalogs.hiding(name):
        # One query; the picked entries read in one coalesced batch, each record checked on
        # its own: a damaged record is its key's error line, not the batch's.
        found = cat.describe_many(name, keys, want=want, version=version)
    size = sum(
        view.nbytes * (2 if data else 1)  # base64 is 4/3: counted as 2 with the JSON around it
        for record in found.records.values()
        for view in (e.view for e in record.values())
        if data or view.nbytes <= INLINE_MAX
    )
    check_bytes(size, services.config.max_response_bytes, "the batch's answer")
    scrub = services.catalogs.scrub

    def lines() -> Iterator[bytes]:
        for i, key in enumerate(keys):
            line = _batch_line(request, catalog, name, i, key, found, picked, version, data, scrub)
            yield dumps(line) + b"\n"

    return StreamingResponse(lines(), media_type=NDJSON)


def _batch_line(
    request: Request,
    catalog: str,
    dataset: str,
    index: int,
    key: str,
    found: DescribedBatch,
    picked: frozenset[str] | None,
    version: Version,
    data: bool,
    scrub: Callable[[str], str],
) -> dict[str, Any]:
    error = found.errors.get(key)
    if error is not None:
        _log.error("batch of %r: key %r: %s", dataset, key, error)  # the path is for the operator
        return {"index": index, "key": key, "status": "error", "error": error_body(error, scrub)}
    record = found.records.get(key)
    if record is None:
        return {"index": index, "key": key, "status": "not_found"}
    href = _href(request, catalog, dataset, key, version)
    described = [i for i in found.described[key] if picked is None or i.name in picked]
    return {
        "index": index,
        "key": key,
        "status": "found",
        "sample": sample_json(
            catalog, dataset, record, version, href, data=data, described=described
        ),
    }


def sql(request: Request, services: Services, who: Principal) -> Response:
    """A read-only SQL query against one catalog (``shardcat sql``'s runner and bounds)."""
    if not services.config.sql:
        raise AccessDeniedError(
            "this server does not run SQL",
            status=403,
            hint=Hint(python="start it with sql=True", cli="start it with --sql"),
        )
    if not who.unscoped:
        raise AccessDeniedError(
            "SQL reads every table of the catalog: a token scoped to datasets may not run it",
            status=403,
            hint=Hint(
                python="filter with GET .../keys?prefix=",
                cli="use a token made without --dataset",
            ),
        )
    body = _body(request)
    if not isinstance(body, dict) or not isinstance(body.get("query"), str):
        raise BadRequestError('the body must be {"query": "SELECT ...", "limit": 1000}')
    limit = body.get("limit", 1000)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 100_000:
        raise BadRequestError("limit must be a whole number from 1 to 100000")
    asked = body.get("catalog") or _query(request, "catalog")
    if asked is not None and not isinstance(asked, str):
        raise BadRequestError("catalog must be a catalog's name")
    catalog = services.catalogs.choose(who, asked)
    cat = services.catalogs.get(catalog)
    postgres = cat.engine.dialect.name == "postgresql"
    result = run_read_only(
        cat.engine,
        body["query"],
        limit=limit,
        timeout=services.config.sql_timeout,
        max_bytes=services.config.max_response_bytes,
        role=services.config.sql_role if postgres else None,
    )
    scrub = services.catalogs.scrub
    rows = [
        {
            col: (scrub(v) if isinstance(v, str) else v)
            for col, v in zip(result.columns, map(json_cell, row))
        }
        for row in result.rows
    ]
    return JsonBody(
        {
            "catalog": catalog,
            "columns": list(result.columns),
            "rows": rows,
            "truncated": result.cut is not None,
            "cut": result.cut,
            "limit": limit,
            "max_bytes": services.config.max_response_bytes,
        }
    )


def health(request: Request) -> Response:
    """Liveness for health checks: no token, no catalog query."""
    return JSONResponse({"status": "ok"})
