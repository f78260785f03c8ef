"""Real parts for the tests: S3 (moto), Azure (Azurite), GCS (gcp-storage-emulator) and HTTP
servers on loopback, and PostgreSQL.

No mocks: s3fs talks HTTP to a moto server on 127.0.0.1, adlfs to an
Azurite emulator, gcsfs to gcp-storage-emulator, fsspec's HTTPFileSystem to
a ranged file server (tests/_servers.py), and catalog tests run against the
real PostgreSQL named by SHARDCAT_TEST_POSTGRES_URL, each test in a schema
of its own. In CI (CI=true) a missing PostgreSQL, Azurite or GCS emulator
fails the run instead of skipping tests.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from _servers import (
    GcsEmulator,
    azurite,
    azurite_binary,
    azurite_connection_string,
    gcs_emulator,
    moto_bucket,
    ranged_http_server,
)
from shardcat.testing.postgres import postgres_schema

POSTGRES_URL = os.environ.get(
    "SHARDCAT_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# Reads of a store that is away retry for a minute by default; the tests that meet one on
# purpose (a closed port, an outage) fail in seconds. The tests of the deadline set their own.
# Set here, not per test: Dask workers and CLI runs started by tests inherit it.
os.environ.setdefault("SHARDCAT_STORAGE_RETRY_DEADLINE", "3")


# The longest files first (their run times in `pytest --durations`): with two
# workers taking one file at a time (`--dist loadfile`), a long file collected
# last keeps one worker busy while the other idles; collected first, the short
# ones fill in around it. Order within a file is kept.
_LONG_FIRST = (
    "tests/test_interpreters.py",
    "tests/reliability/",
    "tests/doc_commands/",
    "tests/orchestration/test_protocol.py",
    "tests/readers/test_packed.py",
    "tests/cli/test_dataset_cmds.py",
    "tests/cli/test_sql_safety.py",
    "tests/cli/test_no_secrets_catalog.py",
    "tests/cli/test_no_secrets.py",
    "tests/cli/test_no_secrets_catalog_paths.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid
        return next((i for i, p in enumerate(_LONG_FIRST) if path.startswith(p)), len(_LONG_FIRST))

    items.sort(key=rank)


# --- settings ------------------------------------------------------------------


def _shardcat_variables() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("SHARDCAT_")}


@pytest.fixture(autouse=True)
def _settings_restored() -> Iterator[None]:
    """Every test starts and ends with shardcat's settings as the environment gives them.

    Tests switch a setting with ``shardcat.config.set(key=value)`` (``None``: the
    default); this puts each back when the test ends (after monkeypatch's undo).
    A test that leaves a ``SHARDCAT_*`` variable changed (code it calls set
    ``os.environ`` and kept it) fails here, naming it, and the variables are put
    back: else every later test in its worker process would run with that setting.
    """
    before = _shardcat_variables()
    yield
    import sys

    after = _shardcat_variables()
    if after != before:
        os.environ.update(before)
        for k in after.keys() - before.keys():
            del os.environ[k]
    if "shardcat.config" in sys.modules:
        sys.modules["shardcat.config"].refresh()
    if after != before:
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        pytest.fail(f"the test left shardcat's environment variables changed: {changed}")


# --- S3 through moto ---------------------------------------------------------


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 (a free port), for the whole session."""
    from moto.server import ThreadedMotoServer

    for name in ("werkzeug", "moto", "botocore", "urllib3"):
        logging.getLogger(name).setLevel(logging.ERROR)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3(s3_endpoint: str) -> Iterator[dict[str, Any]]:
    """A fresh bucket; yields ``{"bucket", "url", "storage_options", "endpoint"}``."""
    import s3fs

    bucket, options = moto_bucket(s3_endpoint)
    s3fs.S3FileSystem.clear_instance_cache()
    yield {
        "bucket": bucket,
        "url": f"s3://{bucket}",
        "storage_options": options,
        "endpoint": s3_endpoint,
    }
    s3fs.S3FileSystem.clear_instance_cache()


# --- Azure through Azurite ----------------------------------------------------


@pytest.fixture(scope="session")
def azurite_connection(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An Azurite blob service on 127.0.0.1 (a free port) for the session; yields its
    connection string. Skips without Azurite, except in CI, where it fails."""
    binary = azurite_binary()
    if binary is None:
        message = "azurite is not installed (bash scripts/test.sh installs it into .cache/node)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    try:
        with azurite(binary, tmp_path_factory.mktemp("azurite")) as port:
            yield azurite_connection_string(port)
    except RuntimeError as e:
        if IN_CI:
            pytest.fail(str(e))
        pytest.skip(str(e))


@pytest.fixture
def azure(azurite_connection: str) -> Iterator[dict[str, Any]]:
    """A fresh container; yields ``{"container", "url", "storage_options", "connection_string"}``."""
    from azure.storage.blob import BlobServiceClient

    container = f"test-{uuid.uuid4().hex[:12]}"
    service = BlobServiceClient.from_connection_string(azurite_connection)
    service.create_container(container)
    try:
        yield {
            "container": container,
            "url": f"az://{container}",
            "storage_options": {"connection_string": azurite_connection},
            "connection_string": azurite_connection,
        }
    finally:
        service.delete_container(container)
        service.close()


# --- Google Cloud Storage through gcp-storage-emulator --------------------------------


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsEmulator]:
    """gcp-storage-emulator on 127.0.0.1 (a free port, in memory) for the session. Skips
    without the emulator or gcsfs (both in the dev extra), except in CI, where it fails."""
    import importlib.util

    missing = [m for m in ("gcp_storage_emulator", "gcsfs") if importlib.util.find_spec(m) is None]
    if missing:
        message = (
            f"{' and '.join(missing)} not installed "
            "(pip install -e '.[dev]' -c constraints/dev.txt, as scripts/test.sh does)"
        )
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    try:
        with gcs_emulator(tmp_path_factory.mktemp("gcs")) as server:
            yield server
    except RuntimeError as e:
        if IN_CI:
            pytest.fail(str(e))
        pytest.skip(str(e))


@pytest.fixture
def gcs(gcs_server: GcsEmulator) -> Iterator[dict[str, Any]]:
    """A fresh bucket; yields ``{"bucket", "url", "storage_options", "endpoint", "server"}``.

    The options are what a user gives gcsfs for an emulator: no credentials
    (``token="anon"``) and the endpoint; they travel to Dask workers with each task.
    """
    from gcsfs.core import GCSFileSystem

    bucket = f"test-{uuid.uuid4().hex[:12]}"
    gcs_server.create_bucket(bucket)
    GCSFileSystem.clear_instance_cache()
    yield {
        "bucket": bucket,
        "url": f"gs://{bucket}",
        "storage_options": {"token": "anon", "endpoint_url": gcs_server.endpoint},
        "endpoint": gcs_server.endpoint,
        "server": gcs_server,
    }
    GCSFileSystem.clear_instance_cache()


# --- HTTP(S): read-only shards behind a ranged file server -------------------------


@pytest.fixture(scope="session")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    """A ranged HTTP file server on 127.0.0.1; yields ``(base_url, served_folder)``."""
    root = tmp_path_factory.mktemp("http")
    with ranged_http_server(root) as base:
        yield base, root


@pytest.fixture
def http_store(http_server: tuple[str, Any]) -> tuple[str, Any]:
    """A fresh served folder; yields ``(url, local_folder)``: files written to the folder are
    served under the URL."""
    base, root = http_server
    name = uuid.uuid4().hex[:12]
    folder = root / name
    folder.mkdir()
    return f"{base}/{name}", folder


# --- PostgreSQL --------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The URL of the real PostgreSQL; fails in CI when it is unreachable."""
    import sqlalchemy as sa

    engine = sa.create_engine(POSTGRES_URL)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except Exception as e:  # any driver error means: no server
        message = f"PostgreSQL at {POSTGRES_URL} is unreachable ({type(e).__name__}: {e})"
        if IN_CI:
            pytest.fail(message + "; .ci/run must start it")
        pytest.skip(message + "; start it with pg_ctlcluster or set SHARDCAT_TEST_POSTGRES_URL")
    finally:
        engine.dispose()
    return POSTGRES_URL


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A catalog URL whose tables live in a schema of their own, dropped afterwards."""
    with postgres_schema(postgres_server) as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Any) -> str:
    return f"sqlite:///{tmp_path / 'catalog.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def catalog_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """Every catalog test runs on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'catalog.db'}"
    return str(request.getfixturevalue("postgres_url"))
