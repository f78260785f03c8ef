"""Which client reads s3:// URLs (``SHARDCAT_S3_TRANSPORT``, ``auto`` by default), and that both
fail alike.

The rule is configuration (options and ``AWS_*`` variables), so its cases
set variables; reads and errors run against moto on 127.0.0.1: a closed
port, a missing object, and a server that checks signatures.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import shardcat
from shardcat.errors import (
    ShardNotFoundError,
    StorageCredentialsError,
    StoragePermissionError,
    StorageUnreachableError,
)
from shardcat.storage import (
    TRANSPORT_ENV,
    FsspecSource,
    SourceCache,
    choose_transport,
    open_source,
)
from shardcat.storage.objstore import ObstoreSource

pytest.importorskip("obstore")

URL = "s3://bucket/ds/x.shard"
KEYS = {"key": "k", "secret": "s"}
ENDPOINT = {"client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}}


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No ``AWS_*`` variable and an empty AWS config file; yields the config file's path."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.delenv(TRANSPORT_ENV, raising=False)
    config = tmp_path / "aws-config"
    config.write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    return config


# Each case: storage options, environment, the transport auto picks, a word of the reason.
CASES = {
    "keys-and-endpoint": ({**KEYS, **ENDPOINT}, {}, "obstore", "auto"),
    "keys-and-region": ({**KEYS, "client_kwargs": {"region_name": "eu-west-1"}}, {}, "obstore", ""),
    "keys-no-region": (KEYS, {}, "fsspec", "no region"),
    "anonymous": ({"anon": True, "region_name": "us-east-2"}, {}, "obstore", ""),
    "env-keys": (
        {},
        {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_DEFAULT_REGION": "eu-west-1"},
        "obstore",
        "",
    ),
    "env-keys-and-profile": (
        {},
        {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_PROFILE": "dev"},
        "fsspec",
        "AWS_PROFILE",
    ),
    "keys-and-default-profile": (
        {**KEYS, **ENDPOINT},
        {"AWS_DEFAULT_PROFILE": "dev"},
        "fsspec",
        "AWS_DEFAULT_PROFILE",
    ),
    "profile-option": ({"profile": "dev"}, {}, "fsspec", "not all mappable"),
    "aws-files-only": ({}, {"AWS_DEFAULT_REGION": "eu-west-1"}, "fsspec", "no key and secret"),
    "env-key-without-secret": ({}, {"AWS_ACCESS_KEY_ID": "k"}, "fsspec", "no key and secret"),
    "key-without-secret": ({"key": "k", **ENDPOINT}, {}, "fsspec", "partial credentials"),
    "keys-and-env-token": (
        {**KEYS, **ENDPOINT},
        {"AWS_SESSION_TOKEN": "t"},
        "fsspec",
        "AWS_SESSION_TOKEN",
    ),
    "keys-token-and-env-token": (
        {**KEYS, "token": "t2", **ENDPOINT},
        {"AWS_SESSION_TOKEN": "t"},
        "obstore",
        "",
    ),
    "obstore-only-endpoint-variable": (
        {**KEYS, "region_name": "us-east-1"},
        {"AWS_ENDPOINT": "http://elsewhere:9000"},
        "fsspec",
        "AWS_ENDPOINT",
    ),
    "unsigned-by-obstore-only": (
        {**KEYS, **ENDPOINT},
        {"AWS_SKIP_SIGNATURE": "true"},
        "fsspec",
        "AWS_SKIP_SIGNATURE",
    ),
    # obstore would encrypt uploads, or trust other certificates or a proxy; s3fs would not.
    "server-side-encryption-by-obstore-only": (
        {**KEYS, **ENDPOINT},
        {"AWS_SERVER_SIDE_ENCRYPTION": "aws:kms"},
        "fsspec",
        "AWS_SERVER_SIDE_ENCRYPTION",
    ),
    "invalid-certificates-by-obstore-only": (
        {**KEYS, **ENDPOINT},
        {"AWS_ALLOW_INVALID_CERTIFICATES": "true"},
        "fsspec",
        "AWS_ALLOW_INVALID_CERTIFICATES",
    ),
    "proxy-by-obstore-only": (
        {**KEYS, **ENDPOINT},
        {"AWS_PROXY_URL": "http://proxy:3128"},
        "fsspec",
        "AWS_PROXY_URL",
    ),
    # botocore would send to a FIPS or dual-stack endpoint; obstore would not.
    "fips-by-botocore-only": (
        {**KEYS, "region_name": "us-east-1"},
        {"AWS_USE_FIPS_ENDPOINT": "true"},
        "fsspec",
        "AWS_USE_FIPS_ENDPOINT",
    ),
    "dual-stack-by-botocore-only": (
        {**KEYS, "region_name": "us-east-1"},
        {"AWS_USE_DUALSTACK_ENDPOINT": "true"},
        "fsspec",
        "AWS_USE_DUALSTACK_ENDPOINT",
    ),
    # botocore takes the environment's token from AWS_SECURITY_TOKEN first; obstore never reads it.
    "env-keys-and-legacy-token": (
        {},
        {
            "AWS_ACCESS_KEY_ID": "k",
            "AWS_SECRET_ACCESS_KEY": "s",
            "AWS_SECURITY_TOKEN": "t",
            "AWS_DEFAULT_REGION": "eu-west-1",
        },
        "fsspec",
        "AWS_SECURITY_TOKEN",
    ),
    "env-keys-and-both-tokens-alike": (
        {},
        {
            "AWS_ACCESS_KEY_ID": "k",
            "AWS_SECRET_ACCESS_KEY": "s",
            "AWS_SECURITY_TOKEN": "t",
            "AWS_SESSION_TOKEN": "t",
            "AWS_DEFAULT_REGION": "eu-west-1",
        },
        "obstore",
        "",
    ),
    # A private CA's endpoint (MinIO over https): botocore trusts the bundle, obstore would not.
    "ca-bundle-read-by-botocore-only": (
        {**KEYS, "endpoint_url": "https://minio.internal:9000"},
        {"AWS_CA_BUNDLE": "/etc/ssl/private-ca.pem"},
        "fsspec",
        "CA bundle",
    ),
    # No TLS to an http:// endpoint; a system bundle is what obstore trusts anyway.
    "ca-bundle-and-http-endpoint": (
        {**KEYS, **ENDPOINT},
        {"AWS_CA_BUNDLE": "/etc/ssl/private-ca.pem"},
        "obstore",
        "",
    ),
    "system-ca-bundle": (
        {**KEYS, "endpoint_url": "https://minio.internal:9000"},
        {"AWS_CA_BUNDLE": "/etc/ssl/certs/ca-certificates.crt"},
        "obstore",
        "",
    ),
    "unmappable-option": (
        {**KEYS, **ENDPOINT, "config_kwargs": {"retries": {"max_attempts": 1}}},
        {},
        "fsspec",
        "not all mappable",
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_auto_picks_obstore_only_where_it_finds_what_s3fs_would(aws_env, monkeypatch, case):
    options, env, transport, reason = case
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    choice = choose_transport(URL, options)
    assert choice.mode == "auto"
    assert choice.transport == transport, choice.reason
    assert reason in choice.reason
    assert (choice.config is not None) == (transport == "obstore")


def test_endpoint_and_region_from_the_environment_as_botocore_reads_them(aws_env, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("AWS_REGION", "ap-south-1")  # obstore's variable; botocore ignores it
    choice = choose_transport(URL, {})
    assert choice.transport == "obstore"
    assert choice.config is not None
    # No region but an endpoint: signed for us-east-1, as botocore does (not AWS_REGION).
    assert choice.config["endpoint"] == "http://127.0.0.1:1"
    assert choice.config["region"] == "us-east-1"
    assert choice.config["client_options"] == {"allow_http": True}
    # The S3-specific variable comes first; an endpoint in the options before both.
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "https://s3.example.com/")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-3")
    config = choose_transport(URL, {}).config
    assert config is not None
    assert (config["endpoint"], config["region"]) == ("https://s3.example.com", "eu-west-3")
    assert "client_options" not in config
    config = choose_transport(URL, {"endpoint_url": "http://127.0.0.1:2"}).config
    assert config is not None and config["endpoint"] == "http://127.0.0.1:2"
    # Told to ignore configured endpoints, botocore goes to AWS while obstore would still
    # read AWS_ENDPOINT_URL: s3fs.
    monkeypatch.setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    choice = choose_transport(URL, {})
    assert choice.transport == "fsspec" and "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS" in choice.reason
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    config = choose_transport(URL, {}).config
    assert config is not None and "endpoint" not in config and config["region"] == "eu-west-3"


def test_the_aws_config_files_default_section(aws_env, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    aws_env.write_text("[default]\nregion = eu-north-1\n")
    config = choose_transport(URL, {}).config
    assert config is not None and config["region"] == "eu-north-1"
    aws_env.write_text("[default]\nregion = eu-north-1\nendpoint_url = http://minio:9000\n")
    choice = choose_transport(URL, {})
    assert choice.transport == "fsspec" and "endpoint_url" in choice.reason
    aws_env.write_text("[default]\nregion = eu-north-1\nca_bundle = /etc/ssl/private-ca.pem\n")
    choice = choose_transport(URL, {})
    assert choice.transport == "fsspec" and "private-ca.pem" in choice.reason
    # botocore's other switch for configured endpoints: the config file's, under the variable's.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    aws_env.write_text("[default]\nregion = eu-north-1\nignore_configured_endpoint_urls = true\n")
    choice = choose_transport(URL, {})
    assert choice.transport == "fsspec" and "ignore_configured_endpoint_urls" in choice.reason
    monkeypatch.setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "false")
    config = choose_transport(URL, {}).config
    assert config is not None and config["endpoint"] == "http://127.0.0.1:1"
    monkeypatch.delenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    aws_env.write_text("[default\nregion")
    assert "does not parse" in choose_transport(URL, {}).reason


def test_forced_values_and_an_unknown_one(aws_env, monkeypatch):
    monkeypatch.setenv("AWS_PROFILE", "dev")
    assert choose_transport(URL, KEYS).transport == "fsspec"
    monkeypatch.setenv(TRANSPORT_ENV, "obstore")  # forced: credentials as obstore finds them
    assert choose_transport(URL, KEYS).transport == "obstore"
    assert choose_transport(URL, {"profile": "dev"}).transport == "fsspec"  # cannot map it
    monkeypatch.setenv(TRANSPORT_ENV, "fsspec")
    assert choose_transport(URL, {**KEYS, **ENDPOINT}).transport == "fsspec"
    monkeypatch.setenv(TRANSPORT_ENV, "rust")
    with pytest.raises(
        shardcat.errors.StorageError, match="expected 'auto', 'obstore' or 'fsspec'"
    ):
        choose_transport(URL, KEYS)
    monkeypatch.setenv(TRANSPORT_ENV, "")
    assert choose_transport("gs://bucket/x", KEYS).reason == "not an s3:// URL"


def test_without_obstore_auto_is_s3fs_and_forcing_it_says_what_to_install(aws_env, monkeypatch, s3):
    monkeypatch.setitem(sys.modules, "obstore", None)  # what an install without it imports
    monkeypatch.setitem(sys.modules, "obstore.store", None)
    choice = choose_transport(URL, {**KEYS, **ENDPOINT})
    assert choice.transport == "fsspec" and "pip install 'shardcat[s3]'" in choice.reason
    assert isinstance(open_source(URL, {**KEYS, **ENDPOINT}), FsspecSource)
    monkeypatch.setenv(TRANSPORT_ENV, "obstore")
    with pytest.raises(shardcat.errors.StorageError, match=r"pip install 'shardcat\[s3\]'"):
        open_source(URL, {**KEYS, **ENDPOINT})


def test_a_region_redirect_moves_auto_to_s3fs_and_forced_obstore_says_what_to_do(
    http_server, aws_env, monkeypatch
):
    from shardcat.storage import objstore

    monkeypatch.setattr(objstore, "_redirected", set())
    # This server answers /status/301/... with a 301 and no Location: what S3 answers a
    # request signed for another region than the bucket's.
    options = {
        **KEYS,
        "client_kwargs": {"endpoint_url": http_server[0], "region_name": "us-east-1"},
    }
    url = "s3://status/301/x.shard"
    src = open_source(url, options)
    assert src.transport == "obstore"  # type: ignore[attr-defined]
    with pytest.raises(shardcat.errors.StorageError) as err:
        src.read(0, 4)  # now through s3fs, which cannot resolve this server's redirect either
    assert "obstore cannot follow" not in str(err.value)
    assert src.transport == "fsspec"  # type: ignore[attr-defined]
    assert isinstance(open_source(url, options), FsspecSource)  # later opens of the bucket
    monkeypatch.setenv(TRANSPORT_ENV, "obstore")
    forced = open_source(url, options)
    with pytest.raises(shardcat.errors.StorageError) as err:
        forced.read(0, 4)
    assert "redirected the request to the bucket's region" in str(err.value)
    assert "set region_name to the bucket's region" in str(err.value)


# --- against moto ---------------------------------------------------------------------


def _put(s3: dict[str, Any], name: str, data: bytes) -> str:
    import s3fs

    url = f"{s3['url']}/{name}"
    s3fs.S3FileSystem(**s3["storage_options"]).pipe(url, data)
    return url


def test_obstore_reads_the_moto_fixtures_by_default(s3, monkeypatch, caplog):
    monkeypatch.delenv(TRANSPORT_ENV, raising=False)
    url = _put(s3, "a.bin", b"0123456789" * 100)
    with caplog.at_level(logging.DEBUG, logger="shardcat.storage.objstore"):
        src = open_source(url, s3["storage_options"])
    assert isinstance(src, ObstoreSource) and src.transport == "obstore"
    assert src.read(10, 15) == b"01234"
    assert f"{s3['url']} read through obstore: auto" in caplog.text
    with SourceCache(s3["storage_options"]) as cache:
        assert cache.read(url, 0, 4) == b"0123"
    monkeypatch.setenv(TRANSPORT_ENV, "fsspec")
    src = open_source(url, s3["storage_options"])
    assert isinstance(src, FsspecSource) and src.transport == "fsspec"


TRANSPORTS = ["fsspec", "obstore"]


def _errors(monkeypatch: pytest.MonkeyPatch, fn: Any) -> dict[str, BaseException]:
    """The error ``fn()`` raises under each transport."""
    out = {}
    for transport in TRANSPORTS:
        monkeypatch.setenv(TRANSPORT_ENV, transport)
        with pytest.raises(shardcat.errors.ShardcatError) as err:
            fn()
        out[transport] = err.value
    return out


def _read_head(url: str, options: dict[str, Any], transport: str) -> bytes:
    src = open_source(url, options)
    assert src.transport == transport  # type: ignore[attr-defined]
    try:
        return src.read_suffix(16)
    finally:
        src.close()


def test_a_missing_object_is_the_same_error_on_both(s3, monkeypatch):
    url = f"{s3['url']}/gone/x.shard"
    errors = _errors(
        monkeypatch, lambda: _read_head(url, s3["storage_options"], os.environ[TRANSPORT_ENV])
    )
    for e in errors.values():
        assert type(e) is ShardNotFoundError and isinstance(e, FileNotFoundError)
        assert e.path == url
    assert str(errors["fsspec"]) == str(errors["obstore"])


def test_a_refused_connection_is_the_same_error_on_both(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    options = {**KEYS, "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"}}
    errors = _errors(monkeypatch, lambda: _read_head(URL, options, os.environ[TRANSPORT_ENV]))
    for e in errors.values():
        assert type(e) is StorageUnreachableError and isinstance(e, ConnectionError)
        assert str(e).endswith("check the endpoint and the network")
    assert str(errors["fsspec"]) == str(errors["obstore"])


def test_no_credentials_is_the_same_error_on_both(s3, aws_env, monkeypatch):
    # Where obstore looks last (the instance metadata service): a closed port, not 169.254.169.254.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        monkeypatch.setenv("AWS_METADATA_ENDPOINT", f"http://127.0.0.1:{s.getsockname()[1]}")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # botocore's
    options = {"client_kwargs": {"endpoint_url": s3["endpoint"], "region_name": "us-east-1"}}
    url = f"{s3['url']}/x.shard"
    assert choose_transport(url, options).transport == "fsspec"  # auto: no keys anywhere
    errors = _errors(monkeypatch, lambda: _read_head(url, options, os.environ[TRANSPORT_ENV]))
    for e in errors.values():
        assert type(e) is StorageCredentialsError and isinstance(e, PermissionError)
        assert str(e).startswith(f"no S3 credentials found for {url}: set AWS_ACCESS_KEY_ID")
    assert str(errors["fsspec"]) == str(errors["obstore"])


@pytest.fixture(scope="module")
def signing_moto() -> Iterator[tuple[str, str]]:
    """A moto server that checks signatures: bucket ``sig`` holds ``x.shard``; user ``reader``
    has keys and no policy. Yields ``(endpoint, reader's key id)``."""
    from _servers import iam_world

    with iam_world("sig") as (endpoint, key, _):
        yield endpoint, key


@pytest.mark.parametrize("unknown", [True, False], ids=["unknown-key", "wrong-secret"])
def test_bad_credentials_are_the_same_error_on_both(signing_moto, monkeypatch, unknown):
    endpoint, key = signing_moto
    options = {
        "key": "AKIAUNKNOWN000000000" if unknown else key,
        "secret": "not-the-secret-x1",
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
    }
    url = "s3://sig/x.shard"
    errors = _errors(monkeypatch, lambda: _read_head(url, options, os.environ[TRANSPORT_ENV]))
    for e in errors.values():
        assert type(e) is StoragePermissionError and isinstance(e, PermissionError)
        assert str(e).startswith(f"{url}: access denied")
        assert "check the credentials" in str(e) and "not-the-secret-x1" not in str(e)
    assert str(errors["fsspec"]) == str(errors["obstore"])


def test_a_rotated_key_or_refreshed_token_in_the_environment_builds_a_new_store(
    aws_env, monkeypatch
):
    # obstore reads the environment's credentials once, when a store is built.
    from shardcat.storage import objstore
    from shardcat.storage.objstore import s3_store

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFIRST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "first-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    first = s3_store(URL, ENDPOINT)
    assert first is not None
    assert s3_store(URL, ENDPOINT)[0] is first[0]  # type: ignore[index]  # cached
    monkeypatch.setenv("AWS_SESSION_TOKEN", "refreshed")
    refreshed = s3_store(URL, ENDPOINT)
    assert refreshed is not None and refreshed[0] is not first[0]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "rotated-secret")
    rotated = s3_store(URL, ENDPOINT)
    assert rotated is not None and rotated[0] is not refreshed[0]
    # Stores built for older credentials are dropped: one per bucket and configuration.
    kept = [s for s in objstore._stores.values() if s in (first[0], refreshed[0], rotated[0])]
    assert kept == [rotated[0]]


@pytest.mark.parametrize("name", ["region_name", "region"])
def test_a_region_beside_the_other_options_works_through_both(s3, monkeypatch, name):
    # s3fs takes the region in client_kwargs only (botocore's session refuses it at the
    # first request otherwise); obstore takes it either way: both get it.
    options = {**s3["storage_options"], name: "us-east-1"}
    options["client_kwargs"] = {"endpoint_url": s3["endpoint"]}
    for transport in TRANSPORTS:
        monkeypatch.setenv(TRANSPORT_ENV, transport)
        url = f"{s3['url']}/{transport}-{name}.shard"
        with shardcat.ShardWriter(url, storage_options=options, exclusive=True) as w:
            w.add("a", {"bin": transport.encode()})
        assert _read_head(url, options, transport)  # read through this transport
        reader = shardcat.ShardReader(url, storage_options=options)
        assert reader.get("a")["bin"].data == transport.encode()
        assert shardcat.storage.resolve(url, options)[0].ls(s3["bucket"])


def test_fips_in_the_config_file_and_an_old_botocore_keep_s3fs(aws_env, monkeypatch):
    from shardcat.storage import transport

    options = {**KEYS, "region_name": "us-east-1"}
    aws_env.write_text("[default]\nuse_fips_endpoint = true\n")
    choice = choose_transport(URL, options)
    assert (choice.transport, "use_fips_endpoint" in choice.reason) == ("fsspec", True)
    aws_env.write_text("")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    assert choose_transport(URL, KEYS).transport == "obstore"
    # A botocore before 1.31 does not read AWS_ENDPOINT_URL: s3fs would go to AWS itself.
    monkeypatch.setattr(transport, "_botocore_reads_env_endpoints", lambda: False)
    choice = choose_transport(URL, KEYS)
    assert (choice.transport, "before 1.31" in choice.reason) == ("fsspec", True)
