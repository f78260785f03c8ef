"""What a ``shardcat serve`` process is told: catalogs by name, checks, settings, workers' copy."""

from __future__ import annotations

import pytest

import shardcat.config
from shardcat.errors import BadRequestError
from shardcat.serve.config import CONFIG_ENV, ServeConfig, parse_catalog


def test_catalogs_are_named_or_get_a_default_name():
    assert parse_catalog("prod=postgresql+psycopg://u@h/db") == (
        "prod",
        "postgresql+psycopg://u@h/db",
    )
    assert parse_catalog("sqlite:////data/c.db") == ("default", "sqlite:////data/c.db")
    assert parse_catalog("sqlite:////data/c.db", 2) == ("default3", "sqlite:////data/c.db")
    # A URL whose query holds '=' is a URL, not NAME=URL.
    url = "postgresql+psycopg://u@h/db?options=-csearch_path%3Dx&sslmode=require"
    assert parse_catalog(url) == ("default", url)
    with pytest.raises(BadRequestError, match="catalog name"):
        parse_catalog("bad name=sqlite://")
    with pytest.raises(BadRequestError, match="names no URL"):
        parse_catalog("lab=")


def test_the_configuration_refuses_what_cannot_work():
    one = (("a", "sqlite://"),)
    with pytest.raises(BadRequestError, match="at least one catalog"):
        ServeConfig(catalogs=())
    with pytest.raises(BadRequestError, match="must differ"):
        ServeConfig(catalogs=(("a", "sqlite://"), ("a", "sqlite:///x.db")))
    for root in ("shardcat", "/shardcat/"):
        with pytest.raises(BadRequestError, match="--root-path"):
            ServeConfig(catalogs=one, root_path=root)
    with pytest.raises(BadRequestError):
        ServeConfig(catalogs=one, workers=0)
    assert "sqlite" not in repr(ServeConfig(catalogs=(("a", "sqlite:///secret.db"),)))


def test_limits_come_from_the_settings_and_options_win():
    with shardcat.config.set(
        serve_max_batch_keys=7, serve_max_response_bytes="1MiB", serve_rate_limit=3
    ):
        config = ServeConfig.from_settings((("a", "sqlite://"),), rate_burst=9, port=None)
    assert (config.max_batch_keys, config.max_response_bytes) == (7, 1024**2)
    assert (config.rate_limit, config.rate_burst, config.port) == (3.0, 9, 8765)
    with shardcat.config.set(serve_max_response_bytes="lots"), pytest.raises(BadRequestError):
        ServeConfig.from_settings((("a", "sqlite://"),))


def test_workers_get_the_same_configuration():
    config = ServeConfig(
        catalogs=(("a", "sqlite:///a.db"), ("b", "postgresql+psycopg://u:pw@h/db")),
        cors_origins=("https://x.example",),
        root_path="/sc",
        storage_options={"key": "k"},
        sql=True,
    )
    assert ServeConfig.from_env({CONFIG_ENV: config.to_env()}) == config
    with pytest.raises(BadRequestError, match="shardcat serve"):
        ServeConfig.from_env({})
