"""Which client reads or writes an s3:// URL: obstore (Rust, no GIL) where it would do what s3fs would, else s3fs.

``SHARDCAT_S3_TRANSPORT`` selects it:

- ``auto`` (the default): obstore when it is installed, every storage option
  maps to its configuration (:func:`store_config`) and it will use the same
  credentials, endpoint and region as s3fs (botocore) would. Those are found
  the same way by both only in these cases, so only these take obstore:

  * credentials: ``anon=True``; or ``key`` and ``secret`` in the options
    (with ``token`` if any: a session token in ``AWS_SESSION_TOKEN`` alone
    would be added by obstore, not by botocore); or, with none in the
    options, ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` in the
    environment (botocore's first source after explicit keys), with no
    ``AWS_SECURITY_TOKEN`` other than ``AWS_SESSION_TOKEN`` (botocore takes
    that legacy name first, obstore does not read it);
  * no profile in play: no ``AWS_PROFILE`` / ``AWS_DEFAULT_PROFILE`` (a
    ``profile`` option does not map), and the config file's ``[default]``
    section (``AWS_CONFIG_FILE``, else ``~/.aws/config``) sets no
    ``endpoint_url``, ``services`` or ``s3`` settings;
  * the endpoint is botocore's: ``endpoint_url`` in the options, else
    ``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL`` (both ignored under
    ``AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true``, or without that variable
    the config file's ``ignore_configured_endpoint_urls = true``), else AWS itself; it is
    passed to obstore explicitly. Variables that only obstore reads and that
    change where or how it asks (``AWS_ENDPOINT``, ``AWS_SKIP_SIGNATURE``,
    ``AWS_VIRTUAL_HOSTED_STYLE_REQUEST``, ``AWS_REQUEST_PAYER``,
    ``AWS_S3_EXPRESS``), that change how uploads are stored
    (``AWS_SERVER_SIDE_ENCRYPTION``, ``AWS_SSE_*``, ``AWS_CONDITIONAL_PUT``,
    ``AWS_UNSIGNED_PAYLOAD``) or which certificates and proxy are used
    (``AWS_ALLOW_INVALID_CERTIFICATES``, ``AWS_PROXY_*``) keep s3fs; so do
    botocore's FIPS and dual-stack endpoints (``AWS_USE_FIPS_ENDPOINT``,
    ``AWS_USE_DUALSTACK_ENDPOINT``, or the config file's ``use_fips_endpoint`` /
    ``use_dualstack_endpoint``), a botocore too old to read
    ``AWS_ENDPOINT_URL`` (before 1.31) when it is set, and, for an https endpoint, a CA
    bundle of botocore's (``AWS_CA_BUNDLE``, else the config file's
    ``ca_bundle``) other than ``SSL_CERT_FILE`` or a system bundle (obstore
    trusts only those: a private CA's MinIO, a TLS-inspecting proxy);
  * the region is known: ``region_name`` in the options, else
    ``AWS_DEFAULT_REGION``, else the config file's ``[default]`` region
    (passed to obstore explicitly), or a custom endpoint (signed as
    ``us-east-1`` without one, as botocore does). On AWS without a known
    region s3fs follows S3's redirect to the bucket's region; obstore cannot.
    Where the known region is not the bucket's, the first request's redirect
    moves that source, and later opens of the bucket, to s3fs
    (:class:`.objstore.ObstoreSource`).

  Everything else (profiles, credentials only in ``~/.aws`` files, SSO,
  instance or container roles without keys in the environment, options
  obstore does not understand) reads through s3fs, exactly as without
  obstore. So ``auto`` never changes which buckets a user can read.
- ``obstore``: obstore whenever the options map (an error if it is not
  installed); credentials as obstore finds them (options, then ``AWS_*``).
- ``fsspec``: always s3fs.

Uploads follow the same rule (:mod:`.objput`: an exclusive shard is one PUT
from memory, published on a thread while the next one is encoded), and a
process forked after obstore ran reads and writes through s3fs (:mod:`.objstore`).
"""

from __future__ import annotations

import configparser
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .._types import StorageOptions
from ..errors import StorageError
from .fs import S3_PROTOCOLS, protocol_of

__all__ = ["S3_PROTOCOLS", "TRANSPORT_ENV", "TransportChoice", "choose_transport", "store_config"]

TRANSPORT_ENV = "SHARDCAT_S3_TRANSPORT"
"""Environment variable: ``auto`` (default), ``obstore`` or ``fsspec``."""

_MODES = ("auto", "obstore", "fsspec")
# s3fs's options about its own caches and event loop: nothing to map, nothing lost.
_IGNORED = frozenset(
    {
        "use_listings_cache",
        "listings_expiry_time",
        "max_paths",
        "skip_instance_cache",
        "default_block_size",
        "default_cache_type",
        "default_fill_cache",
        "asynchronous",
        "loop",
    }
)
# Read by obstore (object_store's from_env), not by botocore: each changes
# where or how a request goes, so s3fs and obstore would not read alike.
_OBSTORE_ONLY_ENV = (
    "AWS_ENDPOINT",
    "AWS_SKIP_SIGNATURE",
    "AWS_VIRTUAL_HOSTED_STYLE_REQUEST",
    "AWS_REQUEST_PAYER",
    "AWS_S3_EXPRESS",
    # How uploads are stored: encryption, and how "create" is made conditional.
    "AWS_SERVER_SIDE_ENCRYPTION",
    "AWS_SSE_KMS_KEY_ID",
    "AWS_SSE_BUCKET_KEY_ENABLED",
    "AWS_SSE_CUSTOMER_KEY_BASE64",
    "AWS_CONDITIONAL_PUT",
    "AWS_UNSIGNED_PAYLOAD",
    # Which certificates are trusted, and the route to the store.
    "AWS_ALLOW_INVALID_CERTIFICATES",
    "AWS_PROXY_URL",
    "AWS_PROXY_CA_CERTIFICATE",
    "AWS_PROXY_EXCLUDES",
)
# Read by botocore only: each sends s3fs's requests to another endpoint than obstore's.
_BOTOCORE_ONLY_ENV = ("AWS_USE_FIPS_ENDPOINT", "AWS_USE_DUALSTACK_ENDPOINT")
# The system CA bundles obstore (rustls-native-certs, via openssl-probe) trusts anyway;
# a CA bundle of botocore's elsewhere (a private CA's endpoint, such as MinIO over https,
# or a TLS-inspecting proxy) would be trusted by s3fs only.
_SYSTEM_CA_FILES = (
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
)
_profiles: dict[tuple[str, int, int], dict[str, str]] = {}
_PROFILE_ENV = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE")
# Keys of the config file's [default] section that redirect botocore's S3 requests.
_CONFIG_REDIRECTS = (
    "endpoint_url",
    "services",
    "s3",
    "use_fips_endpoint",
    "use_dualstack_endpoint",
)


@dataclass(frozen=True, slots=True)
class TransportChoice:
    """The client that reads one s3:// URL, and why.

    ``config`` holds obstore's ``S3Store`` keywords when ``transport`` is ``"obstore"``.
    """

    transport: Literal["obstore", "fsspec"]
    reason: str
    mode: str
    config: dict[str, Any] | None = field(default=None, repr=False, compare=False)


def mode() -> str:
    """``SHARDCAT_S3_TRANSPORT`` (lowercase, ``auto`` when unset or empty).

    Raises
    ------
    StorageError
        The value is not ``auto``, ``obstore`` or ``fsspec``.
    """
    value = os.environ.get(TRANSPORT_ENV, "").strip().lower() or "auto"
    if value not in _MODES:
        raise StorageError(
            f"{TRANSPORT_ENV}={value!r}: expected 'auto', 'obstore' or 'fsspec' (unset means auto)"
        )
    return value


def store_config(storage_options: StorageOptions | None) -> dict[str, Any] | None:
    """obstore's ``S3Store`` keywords for s3fs's ``storage_options``; None if one cannot be mapped.

    Mapped: ``key``, ``secret``, ``token``, ``anon``, ``endpoint_url`` (also
    in ``client_kwargs``), ``region``/``region_name`` (also in ``client_kwargs``).
    """
    config: dict[str, Any] = {}
    options = dict(storage_options or {})
    client = options.pop("client_kwargs", None) or {}
    if not isinstance(client, Mapping):
        return None
    client = dict(client)
    endpoint = options.pop("endpoint_url", None) or client.pop("endpoint_url", None)
    region = (
        options.pop("region", None)
        or options.pop("region_name", None)
        or client.pop("region_name", None)
    )
    for ours, theirs in (("key", "access_key_id"), ("secret", "secret_access_key")):
        value = options.pop(ours, None)
        if value is not None:
            config[theirs] = value
    token = options.pop("token", None) or options.pop("session_token", None)
    if token is not None:
        config["session_token"] = token
    if options.pop("anon", False):
        config["skip_signature"] = True
    if client or any(k not in _IGNORED for k in options):
        return None
    if endpoint:
        _set_endpoint(config, str(endpoint))
    if region:
        config["region"] = region
    return config


def _set_endpoint(config: dict[str, Any], endpoint: str) -> None:
    config["endpoint"] = endpoint.rstrip("/")
    if endpoint.startswith("http://"):
        config["client_options"] = {"allow_http": True}


def _env(name: str) -> str | None:
    return os.environ.get(name, "").strip() or None


def env_endpoint(profile: Mapping[str, str] | None = None) -> str | None:
    """The S3 endpoint botocore takes from the environment (``AWS_ENDPOINT_URL_S3``, then
    ``AWS_ENDPOINT_URL``), unless told to ignore configured endpoints:
    ``AWS_IGNORE_CONFIGURED_ENDPOINT_URLS``, else ``profile``'s (the config file's
    ``[default]``) ``ignore_configured_endpoint_urls``, is true (botocore's order)."""
    ignore = _env("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
    if ignore is None and profile is not None:
        ignore = profile.get("ignore_configured_endpoint_urls", "").strip() or None
    if (ignore or "").lower() == "true":
        return None
    return _env("AWS_ENDPOINT_URL_S3") or _env("AWS_ENDPOINT_URL")


def _default_profile() -> Mapping[str, str]:
    """The ``[default]`` section of the AWS config file (empty without one; ``unreadable``
    if it does not parse). Parsed once per version of the file (path, mtime, size): every
    s3:// open asks."""
    path = _env("AWS_CONFIG_FILE") or os.path.expanduser(os.path.join("~", ".aws", "config"))
    try:
        st = os.stat(path)
    except OSError:
        return {}  # no file: botocore reads none either
    stamp = (path, st.st_mtime_ns, st.st_size)
    if (cached := _profiles.get(stamp)) is not None:
        return cached
    parser = configparser.RawConfigParser()
    try:
        parser.read(path, encoding="utf-8")
        section = dict(parser["default"]) if parser.has_section("default") else {}
    except (configparser.Error, OSError, UnicodeDecodeError):
        section = {"unreadable": path}  # botocore's reading of it is unknown: keep s3fs
    _profiles.clear()
    _profiles[stamp] = section
    return section


def _auto(config: dict[str, Any]) -> str | None:
    """Completes ``config`` as botocore would configure s3fs; or why s3fs reads instead."""
    if named := next((v for v in _PROFILE_ENV if _env(v)), None):
        return f"{named} is set (profiles are read by s3fs only)"
    if only := next((v for v in _OBSTORE_ONLY_ENV if _env(v)), None):
        return f"{only} is set (obstore would read it, s3fs does not)"
    if only := next((v for v in _BOTOCORE_ONLY_ENV if _env(v)), None):
        return f"{only} is set (s3fs would read it, obstore does not)"
    has_key, has_secret = "access_key_id" in config, "secret_access_key" in config
    if config.get("skip_signature"):
        pass
    elif has_key and has_secret:
        if "session_token" not in config and _env("AWS_SESSION_TOKEN"):
            return "key and secret in the options with AWS_SESSION_TOKEN set (obstore would add it)"
    elif has_key or has_secret or "session_token" in config:
        return "partial credentials in the options (key, secret and token go together)"
    elif not (_env("AWS_ACCESS_KEY_ID") and _env("AWS_SECRET_ACCESS_KEY")):
        return (
            "no key and secret in the options or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
            "(s3fs finds credentials in ~/.aws files, SSO or instance roles)"
        )
    elif (legacy := _env("AWS_SECURITY_TOKEN")) and legacy != _env("AWS_SESSION_TOKEN"):
        # botocore takes the environment's token from AWS_SECURITY_TOKEN first; obstore
        # reads only AWS_SESSION_TOKEN and would sign without it (or with another one).
        return "AWS_SECURITY_TOKEN is set (s3fs reads it, obstore does not)"
    profile = _default_profile()
    if redirect := next((k for k in _CONFIG_REDIRECTS if k in profile), None):
        return f"the AWS config file's [default] sets {redirect} (read by s3fs only)"
    if "unreadable" in profile:
        return f"the AWS config file {profile['unreadable']} does not parse"
    if "endpoint" not in config:
        if (endpoint := env_endpoint(profile)) and not _botocore_reads_env_endpoints():
            return "AWS_ENDPOINT_URL(_S3) is set and this botocore does not read it (before 1.31)"
        if endpoint:
            _set_endpoint(config, endpoint)
        elif _env("AWS_ENDPOINT_URL"):
            return (
                "AWS_ENDPOINT_URL is ignored by s3fs (AWS_IGNORE_CONFIGURED_ENDPOINT_URLS or "
                "the config file's ignore_configured_endpoint_urls), not by obstore"
            )
    if (bundle := _private_ca_bundle(profile)) and not config.get("endpoint", "").startswith(
        "http://"
    ):
        return f"CA bundle {bundle} (AWS_CA_BUNDLE or ca_bundle): trusted by s3fs, not by obstore"
    if "region" not in config:
        region = _env("AWS_DEFAULT_REGION") or profile.get("region")
        if region:
            config["region"] = region
        elif "endpoint" in config:
            config["region"] = "us-east-1"  # botocore signs for it without a region
        else:
            return (
                "no region (region_name, AWS_DEFAULT_REGION or ~/.aws/config): s3fs follows "
                "S3's redirect to the bucket's region, obstore cannot"
            )
    return None


def _botocore_reads_env_endpoints() -> bool:
    """Whether the installed botocore reads ``AWS_ENDPOINT_URL(_S3)`` (1.31 and later, which
    brought ``ignore_configured_endpoint_urls`` with them)."""
    try:
        from botocore.configprovider import BOTOCORE_DEFAUT_SESSION_VARIABLES as variables
    except ImportError:  # no botocore (s3fs not installed): s3fs reads nothing anyway
        return True
    return "ignore_configured_endpoint_urls" in variables


def _private_ca_bundle(profile: Mapping[str, str]) -> str | None:
    """botocore's CA bundle (``AWS_CA_BUNDLE``, else the config file's ``ca_bundle``) where
    obstore would not trust the same certificates: not SSL_CERT_FILE nor a system bundle."""
    bundle = _env("AWS_CA_BUNDLE") or profile.get("ca_bundle", "").strip() or None
    if bundle is None:
        return None
    path = os.path.realpath(os.path.expanduser(bundle))
    trusted = (*_SYSTEM_CA_FILES, _env("SSL_CERT_FILE"), ssl.get_default_verify_paths().cafile)
    if any(t and os.path.realpath(t) == path for t in trusted):
        return None
    return bundle


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
        ``SHARDCAT_S3_TRANSPORT`` has an unknown value.
    """
    selected = mode()
    if protocol_of(url) not in S3_PROTOCOLS:
        return TransportChoice("fsspec", "not an s3:// URL", selected)
    if selected == "fsspec":
        return TransportChoice("fsspec", f"{TRANSPORT_ENV}=fsspec", selected)
    config = store_config(storage_options)
    if config is None:
        keys = ", ".join(sorted(storage_options or {}))
        return TransportChoice("fsspec", f"storage options ({keys}) not all mappable", selected)
    if selected == "obstore":
        if "endpoint" not in config and (endpoint := env_endpoint()):
            _set_endpoint(config, endpoint)  # obstore does not read AWS_ENDPOINT_URL_S3
        return TransportChoice("obstore", f"{TRANSPORT_ENV}=obstore", selected, config)
    if not _obstore_installed():
        return TransportChoice(
            "fsspec", "obstore is not installed (pip install 'shardcat[s3]')", selected
        )
    if (why := _auto(config)) is not None:
        return TransportChoice("fsspec", why, selected)
    return TransportChoice(
        "obstore", "auto: the credentials, endpoint and region s3fs would use", selected, config
    )
