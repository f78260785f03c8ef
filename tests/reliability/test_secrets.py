"""Secrets through the Python API: never in an exception, a traceback, a log record or a catalog row.

The command line has its own audit (tests/cli/test_no_secrets*.py, every
command's output). This one drives the library as a program would: a
PostgreSQL catalog URL whose password is a secret (the server trusts
loopback, so any password connects) and S3 storage options whose key and
secret are secrets (moto accepts any), through a dataset's whole life and
through the failures that quote URLs and options — a catalog that is not
there, a bucket that is not there, an endpoint that does not answer,
missing keys and datasets. Every log record at DEBUG (shardcat's and the
libraries') is formatted with its traceback; every exception is formatted
with its whole chain; every text column of every catalog table is read back.
"""

from __future__ import annotations

import logging
import socket
import traceback
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from shardcat import ShardWriter
from shardcat.errors import ShardcatError
from shardcat.reading import Catalog

MARK = f"Sx{uuid.uuid4().hex[:12]}Qv"


class _Everything(logging.Handler):
    """Every record of every logger, formatted as a log file would keep it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(self.format(record))


@pytest.fixture
def captured_logs() -> Iterator[_Everything]:
    handler = _Everything()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _with_password(url: str, password: str, port: int | None = None) -> str:
    u = sa.make_url(url).set(password=password)
    if port is not None:
        u = u.set(port=port)
    return u.render_as_string(hide_password=False)


def _provoke(fn: Callable[[], Any]) -> str:
    """Run ``fn``, which must fail with a shardcat error; its message and whole traceback."""
    with pytest.raises(ShardcatError) as err:
        fn()
    return "".join(traceback.format_exception(err.value)) + repr(err.value)


def test_no_secret_in_errors_logs_or_rows(
    postgres_url: str, s3: dict[str, Any], captured_logs: _Everything, tmp_path: Any
) -> None:
    catalog_url = _with_password(postgres_url, f"pw-{MARK}")
    options = {
        **s3["storage_options"],
        "key": f"AKIA{MARK}",
        "secret": f"secret-{MARK}",
    }
    root = f"{s3['url']}/ds"
    texts: list[str] = []

    with Catalog(catalog_url, storage_options=options) as cat:
        texts.append(repr(cat))
        cat.create_dataset("secrets", root)
        with ShardWriter(f"{root}/ds-000000.shard", storage_options=options) as w:
            for i in range(20):
                w.write({"__key__": f"k/{i:03d}", "txt": f"value {i}"})
        info = w.close()
        cat.register_shard("secrets", info)
        assert cat.get("secrets", "k/007").decode()["txt"] == "value 7"
        assert len(cat.get_many("secrets", ["k/001", "k/002"]).found()) == 2
        texts.append(repr(cat.verify("secrets")))

        texts.append(_provoke(lambda: cat.get("secrets", "no/such/key")))
        texts.append(_provoke(lambda: cat.get("no-such-dataset", "k/001")))
        # A dataset whose shard lives in a bucket that is not there.
        cat.create_dataset("elsewhere", f"s3://no-bucket-{uuid.uuid4().hex[:8]}/ds")
        texts.append(
            _provoke(
                lambda: ShardWriter(
                    f"s3://no-bucket-{uuid.uuid4().hex[:8]}/x.shard", storage_options=options
                ).close()
            )
        )

    # A store that does not answer, with the secrets in the options.
    port = _closed_port()
    dead = {
        "key": f"AKIA{MARK}",
        "secret": f"secret-{MARK}",
        "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}", "region_name": "us-east-1"},
        "config_kwargs": {"retries": {"max_attempts": 1}},
    }
    with Catalog(catalog_url, storage_options=dead) as cat:
        texts.append(_provoke(lambda: cat.get("secrets", "k/007")))

    # A catalog that is not there: the URL with its password is in the engine's hands.
    texts.append(
        _provoke(
            lambda: Catalog(_with_password(postgres_url, f"pw-{MARK}", _closed_port())).datasets()
        )
    )

    leaked = [t for t in texts if MARK in t]
    assert leaked == [], leaked[0][:2000] if leaked else ""
    logged = [t for t in captured_logs.texts if MARK in t]
    assert captured_logs.texts, "DEBUG logging captured nothing: the audit would be empty"
    assert logged == [], logged[:3]

    # Nothing secret was stored: every text column of every table, read back.
    engine = sa.create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            meta = sa.MetaData()
            meta.reflect(bind=conn)
            assert {"datasets", "shards", "records"} <= set(meta.tables)
            for table in meta.tables.values():
                for row in conn.execute(sa.select(table)):
                    assert MARK not in repr(tuple(row)), f"a secret in table {table.name}"
    finally:
        engine.dispose()
