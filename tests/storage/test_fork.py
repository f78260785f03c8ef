"""Storage after fork and spawn: a child process reads S3 after its parent did.

s3fs's filesystems own an event loop and refuse to be used in a forked child
("This class is not fork-safe"): a PyTorch DataLoader with worker processes
forks after the parent's first lookup. The child must get filesystems of
its own. With ``SHARDCAT_S3_TRANSPORT=obstore`` too: obstore's runtime hangs
in a forked child, so such a child reads through s3fs (storage/objstore.py).
"""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest

import shardcat
from shardcat.storage import open_source, resolve

N = 20


@pytest.fixture(autouse=True, params=["fsspec", "obstore"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test with s3fs and with obstore as the S3 read transport (children inherit it)."""
    if request.param == "obstore":
        pytest.importorskip("obstore")
    shardcat.config.set(s3_transport=request.param)
    return str(request.param)


def _write_dataset(s3: dict[str, Any], tmp_path: Any) -> tuple[str, str]:
    url = f"{s3['url']}/ds/train-000000.shard"
    opts = s3["storage_options"]
    with shardcat.ShardWriter(url, storage_options=opts) as w:
        for i in range(N):
            w.add(f"k{i}", {"txt": f"v{i}"})
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    with shardcat.Catalog(catalog, storage_options=opts, create=True) as cat:
        cat.create_dataset("train", f"{s3['url']}/ds")
        cat.reindex("train", [url])
    return catalog, url


def _child_lookups(catalog: str, options: dict[str, Any], keys: list[str]) -> list[str]:
    """Runs in the child: lookups through a catalog, as a DataLoader worker does."""
    with shardcat.Catalog(catalog, storage_options=options) as cat:
        return [cat.get("train", k)["txt"].decode() for k in keys]


def _child_read(url: str, options: dict[str, Any]) -> bytes:
    src = open_source(url, options)
    try:
        return src.read(0, 4)
    finally:
        src.close()


_inherited: Any = None


def _child_inherited_lookups(keys: list[str]) -> list[str]:
    """Runs in a forked child: the parent's own Catalog object, already used there."""
    return [_inherited.get("train", k)["txt"].decode() for k in keys]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_child_reads_s3_after_its_parent_did(s3, tmp_path, method):
    catalog, url = _write_dataset(s3, tmp_path)
    opts = s3["storage_options"]
    with shardcat.Catalog(catalog, storage_options=opts) as cat:
        assert cat.get("train", "k3")["txt"].data == b"v3"  # the parent's filesystem is in use
    head = _child_read(url, opts)  # and a raw read in the parent
    ctx = multiprocessing.get_context(method)
    with ctx.Pool(2) as pool:
        got = pool.starmap(
            _child_lookups, [(catalog, opts, ["k1", "k2"]), (catalog, opts, ["k5", "k19"])]
        )
        raw = pool.starmap(_child_read, [(url, opts)] * 2)
    assert got == [["v1", "v2"], ["v5", "v19"]]
    assert raw == [head] * 2


def test_a_forked_child_uses_the_parents_catalog_object(s3, tmp_path):
    global _inherited
    catalog, _ = _write_dataset(s3, tmp_path)
    with shardcat.Catalog(catalog, storage_options=s3["storage_options"]) as cat:
        assert cat.get("train", "k0")["txt"].data == b"v0"
        _inherited = cat
        try:
            with multiprocessing.get_context("fork").Pool(2) as pool:
                got = pool.map(_child_inherited_lookups, [["k1"], ["k7", "k8"]])
        finally:
            _inherited = None
        assert got == [["v1"], ["v7", "v8"]]
        assert cat.get("train", "k9")["txt"].data == b"v9"  # the parent still reads


def test_a_forked_child_gets_filesystems_of_its_own(s3):
    opts = s3["storage_options"]
    parent_fs, _ = resolve(f"{s3['url']}/x", opts)
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        same = pool.apply(_same_fs_as_parent, (id(parent_fs), f"{s3['url']}/x", opts))
    assert same is False
    assert resolve(f"{s3['url']}/x", opts)[0] is parent_fs  # the parent keeps its own


def _same_fs_as_parent(parent_id: int, url: str, options: dict[str, Any]) -> bool:
    return id(resolve(url, options)[0]) == parent_id
