"""Which client reads or writes an s3:// URL: obstore (Rust, no GIL) where it sends what s3fs sends, else s3fs.

Where a request goes is decided once, by botocore, for the s3fs filesystem
of the URL and its storage options (:func:`s3_route`): s3fs's own client is
asked to prepare a GetObject and a PutObject of a probe key and stopped just
before it signs them (nothing is sent). What it prepared gives the endpoint
and the addressing style (the request's URL), the signing region, whether
it signs at all, the credentials it signs with, the certificates it trusts
and any header it adds (requester pays, server-side encryption, ...): every
source botocore reads (storage options, ``AWS_ENDPOINT_URL_S3``,
``AWS_ENDPOINT_URL``, profiles and the config file, FIPS and dual-stack
switches, region variables, SSO and role credentials) is read by botocore
itself, never again by hand here. obstore is then given each of these
explicitly (endpoint and ``aws_endpoint_url_s3``, region, addressing style,
signing, credentials through a provider), so no variable it reads on its
own can send a request elsewhere.

``SHARDCAT_S3_TRANSPORT`` selects the client:

- ``auto`` (the default): obstore when it is installed and botocore's
  request maps to it exactly: no header obstore would not send, a plain
  SigV4 signature (or none, ``anon=True``), an endpoint in path or virtual
  host style, credentials that do not expire (keys in the options, the
  environment or a profile's files; s3fs refreshes SSO, assumed-role and
  instance credentials), certificates obstore trusts too (the system's, or
  ``SSL_CERT_FILE``), a region that was configured where the endpoint is AWS
  itself (s3fs follows S3's redirect to a bucket's region, obstore cannot),
  and none of the variables only obstore reads that no explicit setting
  undoes (server-side encryption, conditional puts, invalid certificates,
  proxies). Everything else reads through s3fs, exactly as without obstore,
  so ``auto`` never changes which endpoint or bucket a request reaches.
- ``obstore``: obstore whenever botocore's request can be expressed to it
  (an endpoint it can address, no header or signature it would not send),
  with the same endpoint, region and credentials (refreshed through
  botocore when they expire); where botocore found no credentials, obstore
  looks for its own. s3fs otherwise, with a warning; an error if obstore is
  not installed.
- ``fsspec``: always s3fs.

Uploads follow the same rule (:mod:`.objput`), and a process forked after
obstore ran reads and writes through s3fs (:mod:`.objstore`).
"""

from __future__ import annotations

import os
import threading
import uuid
import weakref
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Literal
from urllib.parse import quote, urlsplit

from .. import config
from .._types import StorageOptions
from ..errors import StorageError
from .fs import S3_PROTOCOLS, protocol_of, resolve

__all__ = [
    "S3_PROTOCOLS",
    "TRANSPORT_ENV",
    "S3Route",
    "TransportChoice",
    "choose_transport",
    "s3_route",
]

TRANSPORT_ENV = config.env_var("s3_transport")
"""Environment variable: ``auto`` (default), ``obstore`` or ``fsspec``."""

_MODES = ("auto", "obstore", "fsspec")
# Read by obstore (object_store's from_env), not by botocore, with no explicit setting that
# undoes them: each changes how uploads are stored, or which certificates and route are used.
_OBSTORE_ONLY_ENV = (
    "AWS_SERVER_SIDE_ENCRYPTION",
    "AWS_SSE_KMS_KEY_ID",
    "AWS_SSE_BUCKET_KEY_ENABLED",
    "AWS_SSE_CUSTOMER_KEY_BASE64",
    "AWS_CONDITIONAL_PUT",
    "AWS_ALLOW_INVALID_CERTIFICATES",
    "AWS_PROXY_URL",
    "AWS_PROXY_CA_CERTIFICATE",
    "AWS_PROXY_EXCLUDES",
)
# Headers botocore puts on a GetObject / PutObject that obstore's requests go without and that
# change nothing about what is stored or where: the checksums botocore asks for or adds, and
# the chunked encoding that carries a trailing one (content-encoding aws-chunked, below).
_BENIGN_HEADERS = frozenset(
    {
        "user-agent",
        "range",
        "expect",
        "content-length",
        "content-md5",
        "transfer-encoding",
        "x-amz-decoded-content-length",
        "x-amz-trailer",
        "x-amz-checksum-mode",
        "x-amz-sdk-checksum-algorithm",
        "x-amz-checksum-crc32",
        "x-amz-checksum-crc32c",
        "x-amz-checksum-crc64nvme",
        "x-amz-checksum-sha1",
        "x-amz-checksum-sha256",
    }
)
# How long obstore keeps refreshable credentials before it asks botocore again.
_ASK_AGAIN = timedelta(minutes=5)
# The system CA bundles obstore (rustls-native-certs, via openssl-probe) trusts anyway.
_SYSTEM_CA_FILES = (
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
)


@dataclass(frozen=True, slots=True)
class S3Route:
    """Where and how s3fs's botocore client sends requests for one bucket.

    Attributes
    ----------
    endpoint:
        The URL requests start with: ``scheme://host[:port][/prefix]``;
        with ``virtual_hosted`` the host names the bucket.
    virtual_hosted:
        The bucket is in the host name, not the path.
    region:
        The region requests are signed for.
    unsigned:
        No signature (``anon=True``).
    region_configured:
        A region was configured (options, environment, profile), so an AWS
        bucket elsewhere would not be redirected.
    credentials:
        botocore's credentials object (None: none found, or unsigned).
    refreshable:
        They expire and botocore refreshes them (SSO, roles, instance metadata).
    frozen:
        ``(access key, secret, token)`` as they were when resolved.
    verify:
        botocore's certificate setting: True, False or a CA bundle's path
        (None: it could not be read, and https goes through s3fs).
    headers:
        Headers botocore adds that obstore would not send (lower case).
    signing:
        Why the signature is not one obstore makes, if it is not.
    loop:
        The s3fs filesystem's event loop: refreshable credentials are refreshed on it.
    """

    endpoint: str
    virtual_hosted: bool
    region: str
    unsigned: bool
    region_configured: bool
    credentials: Any = field(repr=False, compare=False)
    refreshable: bool
    frozen: tuple[str, str, str | None] | None = field(repr=False)
    verify: Any
    headers: tuple[str, ...]
    signing: str | None
    loop: Any = field(repr=False, compare=False, default=None)


@dataclass(frozen=True, slots=True)
class TransportChoice:
    """The client that reads one s3:// URL, and why.

    ``config`` holds obstore's ``S3Store`` keywords and ``credentials`` its
    credential provider when ``transport`` is ``"obstore"``.
    """

    transport: Literal["obstore", "fsspec"]
    reason: str
    mode: str
    config: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    credentials: Any = field(default=None, repr=False, compare=False)
    route: S3Route | None = field(default=None, repr=False, compare=False)


def mode() -> str:
    """The ``s3_transport`` setting (``SHARDCAT_S3_TRANSPORT``; lowercase, ``auto`` when empty).

    Raises
    ------
    StorageError
        The value is not ``auto``, ``obstore`` or ``fsspec``.
    """
    value = str(config.get("s3_transport") or "").strip().lower() or "auto"
    if value not in _MODES:
        raise StorageError(
            f"{TRANSPORT_ENV}={value!r}: expected 'auto', 'obstore' or 'fsspec' (unset means auto)"
        )
    return value


def _env(name: str) -> str | None:
    return os.environ.get(name, "").strip() or None


# --- the route, as botocore resolved it ------------------------------------------------

_routes: dict[tuple[int, int, str], tuple[Any, S3Route | str]] = {}
_routes_lock = threading.Lock()


class _Prepared(Exception):
    """Raised by the probe's hook before botocore signs: nothing is sent."""


def s3_route(url: str, storage_options: StorageOptions | None = None) -> S3Route | str:
    """How s3fs's botocore client, for ``url`` and these options, sends requests to its bucket.

    Returns the :class:`S3Route`, or why it could not be told (a string).
    Asked once per filesystem instance (fsspec's cache: the same options
    give the same instance, as s3fs reads) and bucket, in each process.

    Raises
    ------
    StorageError
        The URL cannot be opened (:func:`.fs.resolve`).
    """
    fs, path = resolve(url, storage_options)
    bucket = path.split("/", 1)[0]
    key = (os.getpid(), id(fs), bucket)
    with _routes_lock:
        cached = _routes.get(key)
    if cached is not None and cached[0]() is fs:
        return cached[1]
    route = _probe(fs, bucket)
    with _routes_lock:
        for gone in [k for k, (ref, _) in _routes.items() if ref() is None]:
            del _routes[gone]  # routes of filesystems fsspec's cache let go
        _routes[key] = (weakref.ref(fs), route)
    return route


def _probe(fs: Any, bucket: str) -> S3Route | str:
    """Prepare a GetObject and a PutObject through s3fs and read where they would go.

    Only public interfaces: s3fs's ``connect``, ``get_s3`` and ``call_s3``
    (so s3fs adds what it adds to every request: requester pays, its extra
    arguments), botocore's ``before-sign`` event and what it is given (the
    prepared request, the signer's public ``get_auth_instance``, which hands
    out the credentials the request would be signed with).
    """
    from fsspec.asyn import sync

    marker = f"shardcat-route-probe-{uuid.uuid4().hex}"
    seen: dict[str, dict[str, Any]] = {}

    def hook(operation: str) -> Any:
        async def before_sign(request: Any, **kwargs: Any) -> None:
            if marker not in request.url:
                return  # another thread's request through the same client: not ours
            signing = request.context.get("signing") or {}
            headers = {k.lower(): str(v) for k, v in request.headers.items()}
            if headers.get("content-encoding") == "aws-chunked":
                del headers["content-encoding"]  # the trailing checksum's framing, not the object's
            version = kwargs.get("signature_version")
            name = signing.get("signing_name") or kwargs.get("signing_name")
            region = signing.get("region") or kwargs.get("region_name")
            seen[operation] = {
                "url": request.url,
                "headers": set(headers),
                "version": version,
                "name": name,
                "region": region,
                "frozen": await _signing_credentials(
                    kwargs.get("request_signer"), name, region, version
                ),
            }
            raise _Prepared

        return before_sign

    try:
        fs.connect()
        client = sync(
            fs.loop, fs.get_s3, bucket
        )  # the bucket's client (s3fs may keep one per region)
    except Exception as e:
        return f"botocore could not prepare a request ({type(e).__name__}: {e})"
    events = client.meta.events
    calls = (
        ("GetObject", "get_object", {"Range": "bytes=0-0"}),
        ("PutObject", "put_object", {"Body": b""}),
    )
    for operation, method, extra in calls:
        name = f"before-sign.s3.{operation}"
        events.register_first(name, hook(operation), unique_id=marker)
        try:
            fs.call_s3(method, Bucket=bucket, Key=marker, **extra)
        except (
            BaseException
        ) as e:  # _Prepared (as s3fs passes it on), or what botocore raised before
            if operation not in seen:
                seen[operation] = {"error": f"{type(e).__name__}: {e}"}
        finally:
            events.unregister(name, unique_id=marker)
    get, put = seen.get("GetObject", {}), seen.get("PutObject", {})
    for prepared in (get, put):
        if "error" in prepared or "url" not in prepared:
            return f"botocore could not prepare a request ({prepared.get('error', 'no request')})"
    parts = urlsplit(get["url"])
    if parts.query or not parts.path.endswith("/" + quote(marker)):
        return f"botocore addresses objects in a way obstore cannot ({parts.netloc})"
    prefix = parts.path[: -len(quote(marker)) - 1]
    if prefix.endswith("/" + bucket):
        endpoint, virtual = f"{parts.scheme}://{parts.netloc}{prefix[: -len(bucket) - 1]}", False
    elif parts.netloc.startswith(bucket + "."):
        endpoint, virtual = f"{parts.scheme}://{parts.netloc}{prefix}", True
    else:
        return f"botocore addresses bucket {bucket} in a way obstore cannot ({parts.netloc})"
    version = get["version"]
    unsigned = version is not None and type(version).__name__ == "UNSIGNED"
    signing = None
    if not unsigned and (str(version) not in ("s3v4", "v4") or get["name"] != "s3"):
        signing = f"botocore signs with {version} for {get['name']}"
    frozen = None if unsigned else get["frozen"]
    session = getattr(fs, "session", None)
    creds = None
    if frozen is not None and frozen[0] != getattr(fs, "key", None):
        # Not the keys s3fs was given (those never expire): botocore's client signs with
        # its session's credentials, resolved when it was made; those are the ones that
        # may expire (SSO, roles, instance metadata, a credential process) and be refreshed.
        creds = sync(fs.loop, _session_credentials, session, frozen[0])
    configured = bool(
        (getattr(fs, "client_kwargs", None) or {}).get("region_name")
        or (session is not None and session.get_config_variable("region"))
    )
    return S3Route(
        endpoint=endpoint.rstrip("/"),
        virtual_hosted=virtual,
        region=str(get["region"] or client.meta.region_name or "us-east-1"),
        unsigned=unsigned,
        region_configured=configured,
        credentials=creds,
        refreshable=creds is not None,
        frozen=frozen,
        verify=_verify(client),
        headers=tuple(sorted((get["headers"] | put["headers"]) - _BENIGN_HEADERS)),
        signing=signing,
        loop=fs.loop,
    )


async def _signing_credentials(
    signer: Any, name: str | None, region: str | None, version: Any
) -> tuple[str, str, str | None] | None:
    """``(access key, secret, token)`` a request would be signed with (None: none found)."""
    if signer is None or version is None or type(version).__name__ == "UNSIGNED":
        return None
    try:
        auth = await signer.get_auth_instance(name or "s3", region, str(version))
    except Exception:
        return None  # botocore cannot sign it: the route says why (signing), s3fs reads it
    found = getattr(auth, "credentials", None)
    if found is None:
        return None
    return (found.access_key, found.secret_key, found.token)


async def _session_credentials(session: Any, access_key: str) -> Any:
    """The session's refreshable credentials, where the client signs with them; else None."""
    from aiobotocore.credentials import AioRefreshableCredentials

    if session is None:
        return None
    try:
        creds = await session.get_credentials()
    except Exception:
        return None
    if not isinstance(creds, AioRefreshableCredentials):
        return None
    current = await creds.get_frozen_credentials()
    return creds if current.access_key == access_key else None


def _verify(client: Any) -> Any:
    """botocore's certificate setting for ``client``: True, False, a CA bundle's path, or
    None where it cannot be read (aiobotocore keeps it on its HTTP session, which has no
    public accessor; None sends https reads through s3fs)."""
    http = getattr(getattr(client, "_endpoint", None), "http_session", None)
    return getattr(http, "_verify", None)


# --- obstore's configuration from the route ----------------------------------------------


class BotocoreCredentials:
    """obstore's ``credential_provider``: the credentials s3fs's botocore client signs with.

    Static ones are handed out as resolved; refreshable ones (SSO, roles)
    are refreshed by botocore when obstore asks after they expire.
    """

    def __init__(self, route: S3Route) -> None:
        self._route = route

    def __call__(self) -> dict[str, Any]:
        route = self._route
        frozen, expires = route.frozen, None
        if route.refreshable:
            from fsspec.asyn import sync

            # botocore refreshes them well before they expire (10-15 minutes); obstore asks
            # again after this, and gets what botocore holds then.
            fresh = sync(route.loop, route.credentials.get_frozen_credentials)
            frozen = (fresh.access_key, fresh.secret_key, fresh.token)
            expires = datetime.now(timezone.utc) + _ASK_AGAIN
        if frozen is None:
            raise StorageError("no S3 credentials to sign with")
        key, secret, token = frozen
        return {
            "access_key_id": key,
            "secret_access_key": secret,
            "token": token,
            "expires_at": expires,
        }


def obstore_config(route: S3Route) -> dict[str, Any]:
    """obstore's ``S3Store`` keywords for ``route``: every setting that decides where and how a
    request goes, given explicitly, so that obstore's own reading of ``AWS_*`` changes none."""
    config: dict[str, Any] = {
        # Both: AWS_ENDPOINT_URL_S3 would take precedence over a plain `endpoint`.
        "endpoint": route.endpoint,
        "aws_endpoint_url_s3": route.endpoint,
        "region": route.region,
        "default_region": route.region,
        "virtual_hosted_style_request": route.virtual_hosted,
        "skip_signature": route.unsigned,
        "request_payer": False,
        "s3_express": False,
        "unsigned_payload": False,
    }
    if route.endpoint.startswith("http://"):
        config["client_options"] = {"allow_http": True}
    return config


def _untrusted(route: S3Route) -> str | None:
    """Why obstore would not trust the certificates botocore trusts, if so (https only)."""
    if not route.endpoint.startswith("https://") or route.verify is True:
        return None
    if route.verify is None:
        return "botocore's certificate setting could not be read"
    if route.verify is False:
        return "botocore does not verify certificates (verify=False); obstore would"
    import ssl  # here: loading it costs a local lookup ~20 ms, and only https asks

    path = os.path.realpath(os.path.expanduser(str(route.verify)))
    trusted = (*_SYSTEM_CA_FILES, _env("SSL_CERT_FILE"), ssl.get_default_verify_paths().cafile)
    if any(t and os.path.realpath(t) == path for t in trusted):
        return None
    try:
        import certifi

        if os.path.realpath(certifi.where()) == path:
            return None  # botocore's default: the public CAs obstore trusts too
    except ImportError:
        pass
    return f"CA bundle {route.verify}: trusted by s3fs, not by obstore"


def _unmappable(route: S3Route) -> str | None:
    """Why obstore cannot be configured to send ``route``'s requests at all, if so."""
    if route.headers:
        return f"s3fs adds headers obstore would not send ({', '.join(route.headers)})"
    return route.signing


def _not_exact(route: S3Route) -> str | None:
    """Why obstore would not send what botocore sends for ``route``, in ``auto``; None if it would."""
    if only := next((v for v in _OBSTORE_ONLY_ENV if _env(v)), None):
        return f"{only} is set (obstore would read it, s3fs does not)"
    if why := _unmappable(route):
        return why
    if not route.unsigned:
        if route.frozen is None:
            return "botocore found no credentials (s3fs reports it; obstore would look elsewhere)"
        if route.refreshable:
            return "the credentials expire and botocore refreshes them (SSO, a role, instance metadata)"
    if (why := _untrusted(route)) is not None:
        return why
    host = urlsplit(route.endpoint).hostname or ""
    if host.endswith(".amazonaws.com") and not route.region_configured:
        return (
            "no region configured (region_name, AWS_DEFAULT_REGION or a profile's): s3fs follows "
            "S3's redirect to the bucket's region, obstore cannot"
        )
    return None


def _obstore_installed() -> bool:
    try:
        import obstore.store  # noqa: F401
    except ImportError:
        return False
    return True


def choose_transport(url: str, storage_options: StorageOptions | None = None) -> TransportChoice:
    """Which client reads ``url`` under ``SHARDCAT_S3_TRANSPORT`` (the module docstring's rule).

    Not S3: ``fsspec``. Does not count forks: a process forked after obstore
    ran reads through s3fs whatever this says (:func:`.objstore.open_obstore`).

    Raises
    ------
    StorageError
        ``SHARDCAT_S3_TRANSPORT`` has an unknown value, or the URL cannot be opened.
    """
    selected = mode()
    if protocol_of(url) not in S3_PROTOCOLS:
        return TransportChoice("fsspec", "not an s3:// URL", selected)
    if selected == "fsspec":
        return TransportChoice("fsspec", f"{TRANSPORT_ENV}=fsspec", selected)
    if selected == "auto" and not _obstore_installed():
        return TransportChoice(
            "fsspec", "obstore is not installed (pip install 'shardcat[s3]')", selected
        )
    route = s3_route(url, storage_options)
    if isinstance(route, str):
        return TransportChoice("fsspec", route, selected)
    if selected == "obstore":
        if unmapped := _unmappable(route):
            return TransportChoice("fsspec", unmapped, selected, route=route)
        usable = route.frozen is not None and not route.unsigned
        provider = BotocoreCredentials(route) if usable else None
        reason = f"{TRANSPORT_ENV}=obstore"
    elif (why := _not_exact(route)) is not None:
        return TransportChoice("fsspec", why, selected, route=route)
    else:
        provider = None if route.unsigned else BotocoreCredentials(route)
        reason = "auto: the endpoint, region and credentials s3fs's botocore resolved"
    return TransportChoice("obstore", reason, selected, obstore_config(route), provider, route)
