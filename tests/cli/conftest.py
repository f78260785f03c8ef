"""Fixtures of the CLI tests."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from _servers import moto_bucket
from shardcat.reading import Catalog
from shardcat.testing.postgres import postgres_schema

from .nosecrets import SRC_KEYS, World, base_env, write_dataset


@pytest.fixture(scope="module")
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, s3_endpoint: str
) -> Iterator[World]:
    root = tmp_path_factory.mktemp("nosecrets")
    src = root / "src"
    src.mkdir()
    for k in SRC_KEYS:
        (src / f"{k}.txt").write_text(f"text of {k}")
    bucket, s3_options = moto_bucket(s3_endpoint, "nsx")
    catalog = f"sqlite:///{root / 'catalog.db'}"
    with Catalog(catalog, storage_options=s3_options) as cat:
        shard = write_dataset(cat, "d1", str(root / "shards"), None)
        write_dataset(cat, "s3d", f"s3://{bucket}/s3d", s3_options)
    env = base_env(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL_S3": s3_endpoint,  # every s3:// URL goes to moto
        }
    )
    try:
        server: str | None = request.getfixturevalue("postgres_server")
    except pytest.skip.Exception:  # no server, outside CI (in CI the fixture fails instead)
        server = None
    with ExitStack() as stack:
        pg = stack.enter_context(postgres_schema(server)) if server else None
        if pg is not None:
            with Catalog(pg) as cat:
                write_dataset(cat, "d1", str(root / "pg-shards"), None)
        yield World(root, src, shard, catalog, env, bucket, s3_endpoint, pg)


@pytest.fixture
def fresh_demo_folder(world: World) -> Iterator[None]:
    """``demo --out ROOT/demo`` may run again in the next test."""
    yield
    shutil.rmtree(world.root / "demo", ignore_errors=True)
