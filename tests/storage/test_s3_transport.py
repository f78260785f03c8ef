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


def _fresh() -> None:
    """Forget s3fs's filesystems: the next one resolves the options and variables anew."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No ``AWS_*`` variable and an empty AWS config file; yields the config file's path.

    s3fs filesystems are resolved once each (as s3fs reads), so its instance
    cache is cleared for every test: the options and variables set here count.
    """
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    shardcat.config.set(s3_transport=None)
    config = tmp_path / "aws-config"
    config.write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    _fresh()
    return config


# Each case: storage options, environment, the transport auto picks, a word of the reason.
# Where botocore's request maps exactly, obstore; the reason otherwise names what does not.
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
    "a-missing-profile": (
        {},
        {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_PROFILE": "dev"},
        "fsspec",
        "could not prepare",
    ),
    "profile-option-missing": ({"profile": "dev"}, {}, "fsspec", "could not prepare"),
    "no-credentials": ({}, {"AWS_DEFAULT_REGION": "eu-west-1"}, "fsspec", "no credentials"),
    "env-key-without-secret": ({}, {"AWS_ACCESS_KEY_ID": "k"}, "fsspec", "PartialCredentials"),
    "key-without-secret": ({"key": "k", **ENDPOINT}, {}, "fsspec", "could not prepare"),
    # botocore signs with the options' keys alone; obstore is given them through a provider,
    # so the environment's token is not added.
    "keys-and-env-token": ({**KEYS, **ENDPOINT}, {"AWS_SESSION_TOKEN": "t"}, "obstore", ""),
    "keys-token-and-env-token": (
        {**KEYS, "token": "t2", **ENDPOINT},
        {"AWS_SESSION_TOKEN": "t"},
        "obstore",
        "",
    ),
    # Variables obstore reads on its own are undone by explicit settings where one exists ...
    "obstore-only-endpoint-variable": (
        {**KEYS, "region_name": "us-east-1"},
        {"AWS_ENDPOINT": "http://elsewhere:9000"},
        "obstore",
        "",
    ),
    "unsigned-by-obstore-only": (
        {**KEYS, **ENDPOINT},
        {"AWS_SKIP_SIGNATURE": "true"},
        "obstore",
        "",
    ),
    "virtual-host-by-obstore-only": (
        {**KEYS, **ENDPOINT},
        {"AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true"},
        "obstore",
        "",
    ),
    # ... and keep s3fs where none does: obstore would encrypt uploads, or trust other
    # certificates or a proxy.
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
    # botocore's FIPS and dual-stack endpoints are what it resolved: obstore is sent there too.
    "fips": (
        {**KEYS, "region_name": "us-east-1"},
        {"AWS_USE_FIPS_ENDPOINT": "true"},
        "obstore",
        "",
    ),
    "dual-stack": (
        {**KEYS, "region_name": "us-east-1"},
        {"AWS_USE_DUALSTACK_ENDPOINT": "true"},
        "obstore",
        "",
    ),
    # botocore takes the environment's token from AWS_SECURITY_TOKEN too: obstore gets it.
    "env-keys-and-legacy-token": (
        {},
        {
            "AWS_ACCESS_KEY_ID": "k",
            "AWS_SECRET_ACCESS_KEY": "s",
            "AWS_SECURITY_TOKEN": "t",
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
    "no-verification": (
        {**KEYS, "client_kwargs": {"endpoint_url": "https://minio.internal:9000", "verify": False}},
        {},
        "fsspec",
        "verify=False",
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
    # Options that change how s3fs retries or caches, not where it asks: mapped.
    "retry-options": (
        {**KEYS, **ENDPOINT, "config_kwargs": {"retries": {"max_attempts": 1}}},
        {},
        "obstore",
        "",
    ),
    # Options that add headers obstore would not send: s3fs.
    "requester-pays": ({**KEYS, **ENDPOINT, "requester_pays": True}, {}, "fsspec", "headers"),
    "upload-encryption": (
        {**KEYS, **ENDPOINT, "s3_additional_kwargs": {"ServerSideEncryption": "AES256"}},
        {},
        "fsspec",
        "x-amz-server-side-encryption",
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_auto_picks_obstore_only_where_it_sends_what_s3fs_sends(aws_env, monkeypatch, case):
    options, env, transport, reason = case
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    choice = choose_transport(URL, options)
    assert choice.mode == "auto"
    assert choice.transport == transport, choice.reason
    assert reason in choice.reason
    assert (choice.config is not None) == (transport == "obstore")


def test_obstore_is_given_botocores_endpoint_region_and_keys_explicitly(aws_env, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("AWS_REGION", "ap-south-1")  # obstore's variable; botocore ignores it
    choice = choose_transport(URL, {})
    assert choice.transport == "obstore" and choice.config is not None
    # No region but an endpoint: signed for us-east-1, as botocore does (not AWS_REGION).
    config = choice.config
    assert config["endpoint"] == config["aws_endpoint_url_s3"] == "http://127.0.0.1:1"
    assert config["region"] == "us-east-1" and config["virtual_hosted_style_request"] is False
    assert config["client_options"] == {"allow_http": True} and config["skip_signature"] is False
    assert choice.credentials() == {
        "access_key_id": "k",
        "secret_access_key": "s",
        "token": None,
        "expires_at": None,
    }
    # The S3-specific variable comes first; an endpoint in the options before both.
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "https://s3.example.com/")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-3")
    _fresh()
    config = choose_transport(URL, {}).config
    assert config is not None
    # botocore addresses buckets in the path at an endpoint given to it, and so does obstore
    assert (config["endpoint"], config["region"]) == ("https://s3.example.com", "eu-west-3")
    assert config["virtual_hosted_style_request"] is False and "client_options" not in config
    config = choose_transport(URL, {"endpoint_url": "http://127.0.0.1:2"}).config
    assert config is not None and config["endpoint"] == "http://127.0.0.1:2"
    # Told to ignore configured endpoints, botocore goes to AWS itself, and so does obstore.
    monkeypatch.setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")
    _fresh()
    config = choose_transport(URL, {}).config
    assert config is not None and config["endpoint"] == "https://bucket.s3.eu-west-3.amazonaws.com"


def test_the_aws_config_files_sections(aws_env, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    aws_env.write_text("[default]\nregion = eu-north-1\n")
    config = choose_transport(URL, {}).config
    assert config is not None and config["region"] == "eu-north-1"
    aws_env.write_text("[default]\nregion = eu-north-1\nendpoint_url = http://minio:9000\n")
    _fresh()
    config = choose_transport(URL, {}).config
    assert config is not None and config["endpoint"] == "http://minio:9000"
    aws_env.write_text("[default]\nregion = eu-north-1\nca_bundle = /etc/ssl/private-ca.pem\n")
    _fresh()
    choice = choose_transport(URL, {})
    assert choice.transport == "fsspec" and "private-ca.pem" in choice.reason
    # botocore's other switch for configured endpoints: the config file's.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    aws_env.write_text("[default]\nregion = eu-north-1\nignore_configured_endpoint_urls = true\n")
    _fresh()
    config = choose_transport(URL, {}).config
    assert config is not None and config["endpoint"].endswith(".s3.eu-north-1.amazonaws.com")
    monkeypatch.setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "false")
    _fresh()
    config = choose_transport(URL, {}).config
    assert config is not None and config["endpoint"] == "http://127.0.0.1:1"
    monkeypatch.delenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    aws_env.write_text("[default\nregion")
    _fresh()
    assert "could not prepare" in choose_transport(URL, {}).reason


def test_forced_values_and_an_unknown_one(aws_env, monkeypatch):
    options = {**KEYS, **ENDPOINT}
    monkeypatch.setenv("AWS_SERVER_SIDE_ENCRYPTION", "aws:kms")
    assert choose_transport(URL, options).transport == "fsspec"
    shardcat.config.set(s3_transport="obstore")  # forced: obstore, at botocore's endpoint
    forced = choose_transport(URL, options)
    assert forced.transport == "obstore" and forced.config is not None
    assert forced.config["endpoint"] == "http://127.0.0.1:9"
    # Where botocore cannot tell where a request would go, not even forced obstore guesses.
    assert choose_transport(URL, {"profile": "dev"}).transport == "fsspec"
    shardcat.config.set(s3_transport="fsspec")
    assert choose_transport(URL, options).transport == "fsspec"
    shardcat.config.set(s3_transport="rust")
    with pytest.raises(
        shardcat.errors.StorageError, match="expected 'auto', 'obstore' or 'fsspec'"
    ):
        choose_transport(URL, KEYS)
    shardcat.config.set(s3_transport="")
    assert choose_transport("gs://bucket/x", KEYS).reason == "not an s3:// URL"


def test_without_obstore_auto_is_s3fs_and_forcing_it_says_what_to_install(aws_env, monkeypatch, s3):
    monkeypatch.setitem(sys.modules, "obstore", None)  # what an install without it imports
    monkeypatch.setitem(sys.modules, "obstore.store", None)
    choice = choose_transport(URL, {**KEYS, **ENDPOINT})
    assert choice.transport == "fsspec" and "pip install 'shardcat[s3]'" in choice.reason
    assert isinstance(open_source(URL, {**KEYS, **ENDPOINT}), FsspecSource)
    shardcat.config.set(s3_transport="obstore")
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
    shardcat.config.set(s3_transport="obstore")
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
    shardcat.config.set(s3_transport=None)
    url = _put(s3, "a.bin", b"0123456789" * 100)
    with caplog.at_level(logging.DEBUG, logger="shardcat.storage.objstore"):
        src = open_source(url, s3["storage_options"])
    assert isinstance(src, ObstoreSource) and src.transport == "obstore"
    assert src.read(10, 15) == b"01234"
    assert f"{s3['url']} read through obstore: auto" in caplog.text
    with SourceCache(s3["storage_options"]) as cache:
        assert cache.read(url, 0, 4) == b"0123"
    shardcat.config.set(s3_transport="fsspec")
    src = open_source(url, s3["storage_options"])
    assert isinstance(src, FsspecSource) and src.transport == "fsspec"


TRANSPORTS = ["fsspec", "obstore"]


def _errors(monkeypatch: pytest.MonkeyPatch, fn: Any) -> dict[str, BaseException]:
    """The error ``fn()`` raises under each transport."""
    out = {}
    for transport in TRANSPORTS:
        shardcat.config.set(s3_transport=transport)
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
        monkeypatch,
        lambda: _read_head(url, s3["storage_options"], shardcat.config.get("s3_transport")),
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
    # One try: how the failure is told (retries: tests/storage/test_read_retries.py).
    shardcat.config.set(storage_retry_deadline=0)
    errors = _errors(
        monkeypatch, lambda: _read_head(URL, options, shardcat.config.get("s3_transport"))
    )
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
    errors = _errors(
        monkeypatch, lambda: _read_head(url, options, shardcat.config.get("s3_transport"))
    )
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
    errors = _errors(
        monkeypatch, lambda: _read_head(url, options, shardcat.config.get("s3_transport"))
    )
    for e in errors.values():
        assert type(e) is StoragePermissionError and isinstance(e, PermissionError)
        assert str(e).startswith(f"{url}: access denied")
        assert "check the credentials" in str(e) and "not-the-secret-x1" not in str(e)
    assert str(errors["fsspec"]) == str(errors["obstore"])


def test_the_store_signs_with_the_filesystems_credentials_and_follows_a_new_filesystem(
    aws_env, monkeypatch
):
    # obstore signs with what s3fs's filesystem resolved; a new filesystem (new options, or
    # its cache cleared) is resolved anew and gets a store of its own.
    from shardcat.storage import objstore
    from shardcat.storage.objstore import s3_store

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFIRST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "first-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    first = s3_store(URL, ENDPOINT)
    assert first is not None
    assert first[2].credentials()["access_key_id"] == "AKIAFIRST"
    assert s3_store(URL, ENDPOINT)[0] is first[0]  # type: ignore[index]  # cached
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAROTATED")
    assert s3_store(URL, ENDPOINT)[0] is first[0]  # type: ignore[index]  # s3fs's keys, as s3fs
    _fresh()
    rotated = s3_store(URL, ENDPOINT)
    assert rotated is not None and rotated[0] is not first[0]
    assert rotated[2].credentials()["access_key_id"] == "AKIAROTATED"
    # Stores built for older filesystems are dropped: one per bucket and route.
    kept = [s for _, s in objstore._stores.values() if s in (first[0], rotated[0])]
    assert kept == [rotated[0]]


@pytest.mark.parametrize("name", ["region_name", "region"])
def test_a_region_beside_the_other_options_works_through_both(s3, monkeypatch, name):
    # s3fs takes the region in client_kwargs only (botocore's session refuses it at the
    # first request otherwise); obstore takes it either way: both get it.
    options = {**s3["storage_options"], name: "us-east-1"}
    options["client_kwargs"] = {"endpoint_url": s3["endpoint"]}
    for transport in TRANSPORTS:
        shardcat.config.set(s3_transport=transport)
        url = f"{s3['url']}/{transport}-{name}.shard"
        with shardcat.ShardWriter(url, storage_options=options, exclusive=True) as w:
            w.add("a", {"bin": transport.encode()})
        assert _read_head(url, options, transport)  # read through this transport
        reader = shardcat.ShardReader(url, storage_options=options)
        assert reader.get("a")["bin"].data == transport.encode()
        assert shardcat.storage.resolve(url, options)[0].ls(s3["bucket"])


def test_expiring_credentials_stay_with_s3fs_unless_forced_then_botocore_refreshes_them(
    aws_env, monkeypatch, tmp_path
):
    """A profile's credential process gives credentials that expire: botocore refreshes them."""
    process = tmp_path / "credentials.sh"
    process.write_text(
        "#!/bin/sh\necho '"
        '{"Version": 1, "AccessKeyId": "AKIAPROC", "SecretAccessKey": "s", '
        '"SessionToken": "tok", "Expiration": "2099-01-01T00:00:00Z"}'
        "'\n"
    )
    process.chmod(0o755)
    aws_env.write_text(f"[default]\nregion = eu-west-1\ncredential_process = {process}\n")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    choice = choose_transport(URL, {})
    assert choice.transport == "fsspec" and "expire" in choice.reason
    shardcat.config.set(s3_transport="obstore")
    forced = choose_transport(URL, {})
    assert forced.transport == "obstore" and forced.credentials is not None
    given = forced.credentials()
    assert (given["access_key_id"], given["token"]) == ("AKIAPROC", "tok")
    assert given["expires_at"] is not None and given["expires_at"].year < 2099  # asked again
    # Keys (with a token) in the options are what the client signs with, not the profile's:
    # they do not expire, and auto reads through obstore.
    shardcat.config.set(s3_transport=None)
    _fresh()
    keyed = choose_transport(URL, {"key": "k", "secret": "s", "token": "t"})
    assert keyed.transport == "obstore", keyed.reason
    assert keyed.credentials is not None and keyed.credentials()["access_key_id"] == "k"
    assert keyed.credentials()["expires_at"] is None
    # Expiring keys without a session token expire all the same.
    process.write_text(
        "#!/bin/sh\necho '"
        '{"Version": 1, "AccessKeyId": "AKIAPROC", "SecretAccessKey": "s", '
        '"Expiration": "2099-01-01T00:00:00Z"}'
        "'\n"
    )
    _fresh()
    untokened = choose_transport(URL, {})
    assert untokened.transport == "fsspec" and "expire" in untokened.reason
