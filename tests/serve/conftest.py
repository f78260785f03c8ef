"""Fixtures of the ``shardcat serve`` tests: real catalogs (SQLite and PostgreSQL), datasets
written by shardcat's own writer under a folder whose name is a marker (it must never reach
a response), tokens of every state, and the app under Starlette's TestClient."""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import shardcat
from shardcat.reading import Catalog
from shardcat.serve import ServeConfig, create_app
from shardcat.serve.tokens import create_token, revoke

with warnings.catch_warnings():
    # Starlette 1.x asks for httpx2 in its TestClient; httpx is what the project pins.
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

MARKER = "SeCrEtMaRk"
"""Part of every store path and catalog file name: no response may contain it."""

KEYS = [f"img/{i:04d}" for i in range(30)]
HOSTILE = [
    "a/b/c",
    "../../etc/passwd",
    "a/../b",
    "100%",
    "%2F",
    "sp ace+plus",
    "uni/ключ/画像",
    "q?x=1#frag",
    "entries/x/entries/y",
    "k" * 3000,
]
DOTS = [".", ".."]
"""Keys a URL path cannot carry (clients drop dot segments): reachable through the batch."""


def payload(key: str) -> dict[str, Any]:
    n = 100 + (sum(key.encode()) * 31) % 5000
    return {
        "jpg": (key.encode() * (n // max(1, len(key)) + 1))[:n],
        "json": {"key": key, "n": n},
        "txt": f"text of {key}",
        "bin": bytes(range(256)) * 4,
    }


def write(cat: Catalog, dataset: str, root: str, keys: list[str], shard: int = 0) -> None:
    with shardcat.ShardWriter(f"{root}/{dataset.replace('/', '_')}-{shard:06d}.shard") as w:
        for k in keys:
            w.add(k, payload(k))
    cat.register_shard(dataset, w.close())


@dataclass
class Served:
    """A catalog with datasets, its tokens, and a client of the app serving it."""

    url: str
    client: Any
    full: str
    """A token for every dataset (and SQL)."""
    train: str
    """A token for 'train' only."""
    expired: str
    revoked: str
    nul: bool
    """The catalog stores a NUL in a key (SQLite; PostgreSQL cannot)."""

    def auth(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.full}"}

    def get(self, path: str, token: str | None = None, **kwargs: Any) -> Any:
        headers = {**self.auth(token), **kwargs.pop("headers", {})}
        return self.client.get(path, headers=headers, **kwargs)

    def post(self, path: str, token: str | None = None, **kwargs: Any) -> Any:
        return self.client.post(path, headers=self.auth(token), **kwargs)


def make_catalog(url: str, root: str) -> tuple[bool, dict[str, str]]:
    """Write the datasets; returns whether a NUL key was stored, and the tokens."""
    with Catalog(url) as cat:
        cat.create_dataset("train", f"{root}/train")
        write(cat, "train", f"{root}/train", KEYS[:20], 0)  # version 1
        cat.dataset("train").tag(1, "v1")
        write(cat, "train", f"{root}/train", KEYS[20:], 1)  # version 2
        cat.create_dataset("val", f"{root}/val")
        write(cat, "val", f"{root}/val", ["v/0", "v/1"])
        cat.create_dataset("team/odd", f"{root}/odd")
        nul = cat.engine.dialect.name == "sqlite"
        write(cat, "team/odd", f"{root}/odd", HOSTILE + DOTS + (["nul\x00key"] if nul else []))
        tokens = {
            "full": create_token(cat, name="full").token,
            "train": create_token(cat, datasets=["train"], expires="30d", name="train").token,
            "expired": create_token(
                cat, expires=dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1)
            ).token,
            "revoked": create_token(cat, name="gone").token,
        }
        revoke(cat, "gone")
    return nul, tokens


@pytest.fixture
def root(tmp_path: Any) -> str:
    folder = tmp_path / f"store-{MARKER}"
    folder.mkdir()
    return str(folder)


@pytest.fixture
def served(catalog_url: str, root: str) -> Iterator[Served]:
    nul, tokens = make_catalog(catalog_url, root)
    config = ServeConfig(
        catalogs=(("main", catalog_url),), token_cache_seconds=0, rate_limit=0, sql=True
    )
    with TestClient(create_app(config)) as client:
        yield Served(catalog_url, client, nul=nul, **tokens)


def client_for(config: ServeConfig, **kwargs: Any) -> TestClient:
    return TestClient(create_app(config), **kwargs)
