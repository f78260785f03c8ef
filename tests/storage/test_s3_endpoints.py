"""Both S3 transports send every request, and the credentials with it, where s3fs sends them.

Reproduces issue 30 ("High: the S3 auto transport sends signed requests to
another endpoint"): with ``client_kwargs={"endpoint_url": A}`` and
``AWS_ENDPOINT_URL_S3=B``, s3fs read from A while ``auto`` picked obstore,
which read from B (obstore's ``AWS_ENDPOINT_URL_S3`` outranked the endpoint
it was given). Two moto servers, each in its own process with its own
bucket ``twin`` holding different bytes, count the requests they answer and
the key id and region each was signed with; every way botocore takes an
endpoint (options, ``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``, a
profile's or the config file's ``endpoint_url`` and ``services`` section,
``AWS_IGNORE_CONFIGURED_ENDPOINT_URLS``) and credentials (options,
environment, a profile's credentials file) and regions is tried under each
``SHARDCAT_S3_TRANSPORT``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import shardcat.config
from _servers import counting_moto, moto_client, requests_seen
from shardcat.storage import open_source

pytest.importorskip("obstore")

URL = "s3://twin/x.shard"
BODY = {"A": b"the bytes at endpoint A " * 8, "B": b"the bytes at endpoint B " * 8}
TRANSPORTS = ("fsspec", "auto", "obstore")


@pytest.fixture(scope="module")
def twins() -> Iterator[dict[str, str]]:
    """Two moto servers, A and B, each with bucket ``twin`` holding its own ``x.shard``."""
    with counting_moto() as a, counting_moto() as b:
        for name, endpoint in (("A", a), ("B", b)):
            client = moto_client(endpoint)
            client.create_bucket(Bucket="twin")
            client.put_object(Bucket="twin", Key="x.shard", Body=BODY[name])
            requests_seen(endpoint)  # forget the set-up
        yield {"A": a, "B": b}


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No ``AWS_*`` variable, empty AWS config and credentials files, no instance metadata."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    shardcat.config.set(s3_transport=None)
    (tmp_path / "config").write_text("")
    (tmp_path / "credentials").write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return tmp_path


Ep = dict[str, str]
# id: (options, environment, config file, credentials file, the server s3fs reads from)
Case = tuple[
    Callable[[Ep], dict[str, Any]],
    Callable[[Ep], dict[str, str]],
    Callable[[Ep], str],
    str,
    str,
]
KEYS = {"key": "AKIDOPTIONS", "secret": "secret-options"}
CASES: dict[str, Case] = {
    "issue-30: options A, AWS_ENDPOINT_URL_S3 B": (
        lambda e: {**KEYS, "client_kwargs": {"endpoint_url": e["A"]}},
        lambda e: {"AWS_ENDPOINT_URL_S3": e["B"]},
        lambda e: "",
        "",
        "A",
    ),
    "options A, AWS_ENDPOINT_URL B": (
        lambda e: {**KEYS, "endpoint_url": e["A"]},
        lambda e: {"AWS_ENDPOINT_URL": e["B"]},
        lambda e: "",
        "",
        "A",
    ),
    "AWS_ENDPOINT_URL_S3 A over AWS_ENDPOINT_URL B": (
        lambda e: dict(KEYS),
        lambda e: {"AWS_ENDPOINT_URL_S3": e["A"], "AWS_ENDPOINT_URL": e["B"]},
        lambda e: "",
        "",
        "A",
    ),
    "AWS_ENDPOINT_URL B alone": (
        lambda e: dict(KEYS),
        lambda e: {"AWS_ENDPOINT_URL": e["B"]},
        lambda e: "",
        "",
        "B",
    ),
    "a profile's endpoint_url A": (
        lambda e: dict(KEYS),
        lambda e: {"AWS_PROFILE": "lab"},
        lambda e: f"[profile lab]\nendpoint_url = {e['A']}\n",
        "",
        "A",
    ),
    "the config file's endpoint B under AWS_ENDPOINT_URL_S3 A": (
        lambda e: dict(KEYS),
        lambda e: {"AWS_ENDPOINT_URL_S3": e["A"]},
        lambda e: f"[default]\nendpoint_url = {e['B']}\n",
        "",
        "A",
    ),
    "a services section's s3 endpoint A": (
        lambda e: dict(KEYS),
        lambda e: {},
        lambda e: f"[default]\nservices = lab\n[services lab]\ns3 =\n  endpoint_url = {e['A']}\n",
        "",
        "A",
    ),
    "AWS_ENDPOINT_URL B over a services section's s3 endpoint A": (
        lambda e: dict(KEYS),
        lambda e: {"AWS_ENDPOINT_URL": e["B"]},
        lambda e: f"[default]\nservices = lab\n[services lab]\ns3 =\n  endpoint_url = {e['A']}\n",
        "",
        "B",
    ),
    "configured endpoints ignored: options A, AWS_ENDPOINT_URL_S3 B": (
        lambda e: {**KEYS, "client_kwargs": {"endpoint_url": e["A"]}},
        lambda e: {"AWS_ENDPOINT_URL_S3": e["B"], "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"},
        lambda e: "",
        "",
        "A",
    ),
    "regions: AWS_DEFAULT_REGION and AWS_REGION differ": (
        lambda e: {**KEYS, "client_kwargs": {"endpoint_url": e["A"]}},
        lambda e: {
            "AWS_ENDPOINT_URL_S3": e["B"],
            "AWS_DEFAULT_REGION": "eu-west-2",
            "AWS_REGION": "ap-south-1",
        },
        lambda e: "",
        "",
        "A",
    ),
    "a region in the options, another in the environment": (
        lambda e: {**KEYS, "region_name": "eu-north-1", "client_kwargs": {"endpoint_url": e["B"]}},
        lambda e: {"AWS_DEFAULT_REGION": "us-west-2", "AWS_ENDPOINT_URL": e["A"]},
        lambda e: "",
        "",
        "B",
    ),
    "keys in the environment, AWS_ENDPOINT_URL_S3 A": (
        lambda e: {},
        lambda e: {
            "AWS_ACCESS_KEY_ID": "AKIDENVIRONMENT",
            "AWS_SECRET_ACCESS_KEY": "secret-env",
            "AWS_ENDPOINT_URL_S3": e["A"],
            "AWS_ENDPOINT_URL": e["B"],
        },
        lambda e: "",
        "",
        "A",
    ),
    "a profile's keys and endpoint B, AWS_ENDPOINT_URL_S3 unset": (
        lambda e: {"profile": "lab"},
        lambda e: {"AWS_ACCESS_KEY_ID": "AKIDNOTTHEPROFILE", "AWS_SECRET_ACCESS_KEY": "x"},
        lambda e: f"[profile lab]\nendpoint_url = {e['B']}\nregion = ca-central-1\n",
        "[lab]\naws_access_key_id = AKIDPROFILE\naws_secret_access_key = secret-profile\n",
        "B",
    ),
}


def _setup(case: Case, twins: Ep, aws_env: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    import s3fs

    options, env, config, credentials, _ = case
    for name, value in env(twins).items():
        monkeypatch.setenv(name, value)
    (aws_env / "config").write_text(config(twins))
    (aws_env / "credentials").write_text(credentials)
    s3fs.S3FileSystem.clear_instance_cache()  # a filesystem is resolved once, as s3fs reads
    return {**options(twins), "use_listings_cache": False}


def _read(options: dict[str, Any], transport: str) -> tuple[bytes, str]:
    shardcat.config.set(s3_transport=transport)
    src = open_source(URL, options)
    try:
        return src.read(0, len(BODY["A"])), str(src.transport)  # type: ignore[attr-defined]
    finally:
        src.close()


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_every_transport_reads_where_s3fs_reads_and_signs_nowhere_else(
    twins, aws_env, monkeypatch, case
):
    options = _setup(case, twins, aws_env, monkeypatch)
    shardcat.config.set(s3_transport="fsspec")  # restored after the test
    expected = case[-1]
    other = "B" if expected == "A" else "A"
    signed: dict[str, set[tuple[str | None, str | None]]] = {}
    for transport in TRANSPORTS:
        data, used = _read(options, transport)
        assert data == BODY[expected], (transport, used)
        if transport == "auto":
            assert used == "obstore", "auto should read this case through obstore"
        else:
            assert used == ("fsspec" if transport == "fsspec" else "obstore")
        hits, stray = requests_seen(twins[expected]), requests_seen(twins[other])
        assert hits and not stray, (transport, stray)  # nothing, credentials included, to the other
        signed[transport] = {(r["key"], r["region"]) for r in hits}
    # The same key id, signed for the same region, through every transport.
    assert len(signed["fsspec"]) == 1
    assert signed["auto"] == signed["obstore"] == signed["fsspec"], signed
