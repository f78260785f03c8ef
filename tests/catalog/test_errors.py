"""Bad input gets typed errors that say what to do; secrets never reach the catalog."""

from __future__ import annotations

import dataclasses
import socket
import sqlite3
import traceback

import pytest
import sqlalchemy as sa

from shardcat.catalog.session import display_url, translate_exception
from shardcat.errors import (
    CatalogError,
    CatalogLockedError,
    CatalogUnreachableError,
    DatasetExistsError,
    DatasetNotFoundError,
    InvalidKeyError,
    InvalidNameError,
    KeyNotFoundError,
)
from shardcat.reading import Catalog
from shardcat.storage import redact

from .helpers import make_dataset, shard_keys, write_shard


def test_locked_sqlite_catalog(sqlite_url, local_root):
    with Catalog(sqlite_url, busy_timeout=0.2) as cat:
        make_dataset(cat, local_root, 1)
        path = sqlite_url.removeprefix("sqlite:///")
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")
        try:
            with pytest.raises(
                CatalogLockedError, match=r"locked by another process.*busy_timeout"
            ) as err:
                cat.create_dataset("valid", local_root)
            assert "0.2 s" in str(err.value)
            with pytest.raises(CatalogLockedError):
                cat.register_shard("train", write_shard(f"{local_root}/x.shard", ["x"]))
            # WAL: readers are not blocked by the writer.
            assert cat.get("train", shard_keys(0)[0]).key == shard_keys(0)[0]
        finally:
            other.execute("ROLLBACK")
            other.close()
        cat.create_dataset("valid", local_root)


def test_locked_before_wal_mode(tmp_path):
    """A file some other program holds exclusively from the start: even opening it is locked."""
    path = tmp_path / "busy.db"
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("CREATE TABLE t (x)")
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(CatalogLockedError, match="locked"):
            Catalog(f"sqlite:///{path}", busy_timeout=0.1)
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_dataset_errors(cat, local_root):
    with pytest.raises(DatasetNotFoundError, match="no datasets yet"):
        cat.dataset("train")
    first = cat.create_dataset("train", local_root, {"owner": "vision"})
    assert first.properties == {"owner": "vision"}
    assert first.format_version == (1, 0)
    assert first.created_at.tzinfo is not None
    with pytest.raises(DatasetExistsError, match="exists already"):
        cat.create_dataset("train", local_root)
    assert cat.create_dataset("train", "/elsewhere", exist_ok=True) == first
    assert [d.name for d in cat.datasets()] == ["train"]
    with pytest.raises(DatasetNotFoundError):
        cat.delete_dataset("nope")
    cat.delete_dataset("nope", missing_ok=True)


def test_a_file_name_given_as_a_key_names_the_samples_key(cat, local_root):
    cat.create_dataset("photos", local_root)
    keys = ["a/img1", "b/scan.v2"]  # a key may hold a dot (--key-rule last-dot)
    cat.register_shard("photos", write_shard(f"{local_root}/p.shard", keys))
    with pytest.raises(KeyNotFoundError) as err:
        cat.get("photos", "a/img1.jpg")
    assert "keys have no file extension: the sample 'a/img1' exists" in str(err.value)
    assert "its entry: 'jpg'" in str(err.value)
    with pytest.raises(KeyNotFoundError, match=r"the sample 'b/scan\.v2' exists") as err:
        cat.get("photos", "b/scan.v2.png")
    with pytest.raises(KeyNotFoundError) as err:
        cat.get("photos", "a/img2.jpg")  # no such sample: no hint
    assert "extension" not in str(err.value)
    with pytest.raises(KeyNotFoundError) as err:
        cat.get("photos", "a/img1.jpg", version=1)  # at a version: the plain message
    assert "extension" not in str(err.value)


def test_delete_dataset_removes_every_row(cat, local_root):
    make_dataset(cat, local_root, 2)
    cat.create_dataset("valid", local_root)
    cat.register_shard("valid", write_shard(f"{local_root}/v.shard", ["v1", "v2"]))
    cat.delete_dataset("train")
    with cat.engine.connect() as conn:
        for table in ("records", "shards", "jobs", "layouts", "layout_entries"):
            (n,) = conn.execute(sa.text(f"SELECT count(*) FROM {table}")).one()
            assert n > 0, table  # the other dataset's rows stay
        assert conn.execute(sa.text("SELECT count(*) FROM records")).scalar() == 2
    with pytest.raises(DatasetNotFoundError):
        cat.get("train", shard_keys(0)[0])
    assert cat.get("valid", "v1").key == "v1"


def test_invalid_key(cat, local_root):
    make_dataset(cat, local_root, 1)
    with pytest.raises(InvalidKeyError):
        cat.get("train", "bad \udc80 key")


def test_closed_catalog(catalog_url, local_root):
    cat = Catalog(catalog_url)
    make_dataset(cat, local_root, 1)
    cat.close()
    cat.close()  # idempotent
    with pytest.raises(CatalogError, match="closed"):
        cat.get("train", shard_keys(0)[0])
    with pytest.raises(CatalogError, match="closed"):
        cat.datasets()


def test_bad_catalog_urls():
    with pytest.raises(CatalogError, match="not a catalog URL"):
        Catalog("no-scheme-here")
    with pytest.raises(CatalogError, match="psycopg"):
        Catalog("postgresql+psycopg2://u@127.0.0.1/db")


def test_postgres_scheme_is_the_same_database_as_postgresql(postgres_url):
    # libpq and hosting panels print postgres://; it is no reason to refuse the catalog.
    url = sa.make_url(postgres_url).set(drivername="postgres").render_as_string(False)
    with Catalog(url) as cat:
        cat.create_dataset("train", "file:///tmp/unused-train", exist_ok=True)
        assert [d.name for d in cat.datasets()] == ["train"]
        assert cat.engine.url.drivername == "postgresql+psycopg"


def test_a_sqlite_url_with_two_slashes_says_how_to_write_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CatalogError, match="two slashes") as err:
        Catalog("sqlite://shardcat.db").datasets()
    assert "sqlite:///shardcat.db" in str(err.value)
    assert "Valid SQLite URL forms" not in str(err.value)  # not SQLAlchemy's four lines
    assert list(tmp_path.iterdir()) == []


def test_a_refused_postgres_port_is_a_connection_error_naming_host_and_port():
    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        url = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/test"
        with pytest.raises(CatalogUnreachableError) as err:
            Catalog(url).datasets()
    text = str(err.value)
    assert isinstance(err.value, ConnectionError)
    assert f"127.0.0.1:{port}" in text and "check that the server is running" in text
    assert "OperationalError" not in text and PASSWORD not in _everything_printed(err.value)


def test_a_sqlite_file_in_a_missing_folder_says_so(tmp_path):
    url = f"sqlite:///{tmp_path / 'no-such-folder' / 'catalog.db'}"
    with pytest.raises(CatalogError, match="cannot open the file") as err:
        Catalog(url).datasets()
    assert "check that its folder exists" in str(err.value)
    assert not (tmp_path / "no-such-folder").exists()


def _all_text(cat):
    out = []
    with cat.engine.connect() as conn:
        for table in sa.inspect(conn).get_table_names():
            for row in conn.execute(sa.text(f"SELECT * FROM {table}")):
                out.extend(
                    bytes(v).decode("latin-1") if isinstance(v, (bytes, memoryview)) else str(v)
                    for v in row
                )
    return "\n".join(out)


def test_credentials_never_reach_the_catalog(catalog_url, local_root):
    secret_options = {"key": "AKIA-SECRET-KEY", "secret": "s3cr3t-value", "token": "tok-123"}
    with Catalog(catalog_url, storage_options=secret_options) as cat:
        cat.create_dataset("train", "s3://alice:pa55word@bucket/train/?X-Amz-Signature=sig-999")
        info = write_shard(f"{local_root}/a.shard", ["a", "b"])
        # The shard as a writer with credentials in its URL would describe it.
        info = dataclasses.replace(
            info, path="https://bob:hunter2@example.com/train/a.shard?token=tok-456&part=1"
        )
        row = cat.register_shard("train", info)
        assert row.url == "https://example.com/train/a.shard?part=1"
        assert cat.info("train").root_url == "s3://bucket/train/"
        dump = _all_text(cat)
    for secret in (
        "AKIA-SECRET-KEY",
        "s3cr3t-value",
        "tok-123",
        "pa55word",
        "alice",
        "sig-999",
        "hunter2",
        "bob:",
        "tok-456",
    ):
        assert secret not in dump, secret


def test_errors_do_not_show_the_database_password():
    with pytest.raises(CatalogError) as err:
        Catalog("postgresql+psycopg://user:topsecret@127.0.0.1:1/nodb")
    assert "topsecret" not in str(err.value)
    assert "***" in str(err.value)


# --- no password in any message ------------------------------------------------

PASSWORD = "Pw0rdZq7"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:notaport/db",
            "postgresql+psycopg://postgres:***@127.0.0.1:notaport/db",
        ),
        (
            f"postgresql+psycopg://postgres:{PASSWORD}@[::1/x",
            "postgresql+psycopg://postgres:***@[::1/x",
        ),
        (
            f"postgresql+psycopg://postgres:{PASSWORD}-p%40ss:w/rd@127.0.0.1:x/db",
            "postgresql+psycopg://postgres:***@127.0.0.1:x/db",
        ),
        (  # a raw '@' in the password: SQLAlchemy takes its tail for the host
            f"postgresql+psycopg://postgres:{PASSWORD}@{PASSWORD}x@127.0.0.1:1/db",
            "postgresql+psycopg://postgres:***@127.0.0.1:1/db",
        ),
        (f"postgresql+psycopg:/postgres:{PASSWORD}@127.0.0.1/db", "postgresql+psycopg:/***@127.0.0.1/db"),
        (f"postgres:{PASSWORD}@127.0.0.1:5432/db", "postgres:***@127.0.0.1:5432/db"),
        (
            f"postgresql+psycopg://u@127.0.0.1/db?password={PASSWORD}&sslmode=require",
            "postgresql+psycopg://u@127.0.0.1/db?password=***&sslmode=require",
        ),
        ("postgresql+psycopg://postgres@127.0.0.1:5432/test", "postgresql+psycopg://postgres@127.0.0.1:5432/test"),
        ("sqlite:////tmp/catalog.db", "sqlite:////tmp/catalog.db"),
        ("sqlite://", "sqlite://"),
    ],
)  # fmt: skip
def test_display_url_hides_the_password_whatever_the_shape(url, shown):
    assert display_url(url) == shown
    if "://" in url and "@[" not in url and ":notaport" not in url and ":x/" not in url:
        assert display_url(sa.engine.make_url(url)) == shown  # URL objects alike


def _everything_printed(error: BaseException) -> str:
    """What ``-v`` shows: the traceback with every chained exception."""
    return "".join(traceback.format_exception(error))


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:notaport/db",
        f"postgresql+psycopg://postgres:{PASSWORD}@[::1/x",
        f"postgresql+psycopg:/postgres:{PASSWORD}@127.0.0.1/db",
        f"postgres:{PASSWORD}@127.0.0.1:5432/db",
        f"postgresql+psycopg://u@127.0.0.1/db?password={PASSWORD}&port=x",
    ],
)
def test_a_malformed_catalog_url_is_refused_without_its_password(url):
    with pytest.raises(CatalogError) as err:
        Catalog(url)
    assert PASSWORD not in _everything_printed(err.value)
    assert "catalog" in str(err.value)


def test_bad_catalog_urls_keep_their_messages():
    with pytest.raises(CatalogError, match=r"not a catalog URL: 'no-scheme-here' \(") as err:
        Catalog("no-scheme-here")
    assert err.value.__cause__ is None  # SQLAlchemy's ArgumentError would quote the URL
    with pytest.raises(CatalogError, match=r"postgresql\+psycopg2://u:\*\*\*@127.0.0.1/db"):
        Catalog(f"postgresql+psycopg2://u:{PASSWORD}@127.0.0.1/db")


def test_driver_errors_quoting_the_host_or_the_uri_are_scrubbed():
    pytest.importorskip("psycopg")
    # An '@' in the password: psycopg cannot resolve the "host" that holds the password's tail.
    url = f"postgresql+psycopg://postgres:{PASSWORD}@{PASSWORD}x@127.0.0.1:1/db"
    with pytest.raises(CatalogError, match=r"resolve host|connection") as err:
        Catalog(url)
    assert PASSWORD not in _everything_printed(err.value)
    # libpq's own URI parser quotes the URI it could not parse.
    import psycopg

    with pytest.raises(psycopg.Error) as raw:
        psycopg.connect(f"postgresql://u:{PASSWORD}@[::1/db")
    assert PASSWORD in str(raw.value)
    translated = translate_exception(raw.value, f"postgresql://u:{PASSWORD}@[::1/db")
    assert PASSWORD not in str(translated) and "u:***@" in str(translated)


def test_storage_urls_lose_their_credentials_and_keep_everything_else():
    assert redact(f"s3://AKIA:{PASSWORD}@bucket/x/a.shard") == "s3://bucket/x/a.shard"
    assert redact(f"s3://AKIA:{PASSWORD}-p%40ss:w/rd@bucket/x") == "s3://bucket/x"
    assert redact(f"memory://user:{PASSWORD}@/x") == "memory:///x"
    signed = f"https://h/a.shard?X-Amz-Credential=AKIA&X-Amz-Signature={PASSWORD}&part=1"
    assert redact(signed) == "https://h/a.shard?part=1"
    for name in ("sig", "access_token", "sslpassword", "sas_token", "AWSAccessKeyId"):
        assert redact(f"https://h/a?{name}={PASSWORD}&v=2") == "https://h/a?v=2", name
    for kept in (
        "s3://bucket/model@v2/a.shard",  # an '@' in the key is not a user
        "https://host:8443/model@v2/a.shard",
        "memory:///a",
        "/local/path@x/a.shard",
        "gs://b/a#1.shard?generation=3",
    ):
        assert redact(kept) == kept


def test_a_dataset_name_that_is_not_unicode_text_is_a_typed_name_error(cat, local_root):
    make_dataset(cat, local_root, 1)
    for call in (lambda: cat.get("train\udc80", "k"), lambda: cat.get_many("train\udc80", ["k"])):
        with pytest.raises(InvalidNameError, match="not valid Unicode text"):
            call()
