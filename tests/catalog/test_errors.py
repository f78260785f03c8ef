"""Bad input gets typed errors that say what to do; secrets never reach the catalog."""

from __future__ import annotations

import dataclasses
import sqlite3

import pytest
import sqlalchemy as sa

from shardcat.catalog import Catalog
from shardcat.errors import (
    CatalogError,
    CatalogLockedError,
    DatasetExistsError,
    DatasetNotFoundError,
    InvalidKeyError,
)

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
        assert cat.dataset("train").root_url == "s3://bucket/train/"
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
