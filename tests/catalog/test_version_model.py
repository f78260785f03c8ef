"""A hypothesis state machine: appends, replaces, deletes, overwrites, compactions, tags, expire
and gc against an in-memory model of every kept version.

After every step every key is checked at every kept version (and at every
tag), no committed shard is left that no kept version reads, and gc has
removed no byte a kept version reads (the lookups read them) and left no
unregistered shard file behind.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    initialize,
    invariant,
    precondition,
    rule,
)

import shardcat
from shardcat.catalog.versions import unreferenced_shards
from shardcat.errors import DuplicateKeyError
from shardcat.orchestration.gc import gc

from .helpers import CatalogMachine, machine_cases

UNIVERSE = [f"k{i}" for i in range(8)]
_dask: list[Any] = []


def _client() -> Any:
    """One in-process Dask client for every compaction of the module (started on first use)."""
    if not _dask:
        from distributed import Client, LocalCluster

        cluster = LocalCluster(
            processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None
        )
        _dask.append(Client(cluster))
    return _dask[0]


@pytest.fixture(scope="module", autouse=True)
def _dask_closed() -> Iterator[None]:
    """Close the module's cluster after its tests: its threads would outlive them in this
    process (a later test that counts objects or threads would see them)."""
    yield
    while _dask:
        client = _dask.pop()
        cluster = client.cluster
        client.close()
        cluster.close()


keys_st = st.lists(st.sampled_from(UNIVERSE), min_size=1, max_size=5, unique=True)


class VersionModel(CatalogMachine):
    """The catalog against ``versions``: number -> {key: payload} for every kept version."""

    @initialize()
    def start(self) -> None:
        self.open_dataset("train")
        self.versions: dict[int, dict[str, str]] = {}
        self.tags: dict[str, int] = {}
        self.latest = 0
        self.steps = itertools.count()

    # --- helpers ---------------------------------------------------------

    def live(self) -> dict[str, str]:
        return dict(self.versions.get(self.latest, {}))

    def _commit(self, keys: list[str], **kw: Any) -> str:
        tag = f"s{next(self.steps)}"
        job = self.cat.begin_job(self.name)
        with shardcat.ShardWriter(os.path.join(self.root, f"{tag}.shard")) as w:
            for k in keys:
                w.add(k, {"txt": f"{k}@{tag}"})
        self.cat.register_shard(self.name, w.close(), job=job)
        try:
            self.cat.commit_job(job, **kw)
        except DuplicateKeyError:
            self.cat.abort_job(job)
            raise
        return tag

    def _new_version(self, state: dict[str, str]) -> None:
        self.latest += 1
        self.versions[self.latest] = state
        assert self.cat.info(self.name).version == self.latest

    # --- rules -------------------------------------------------------------

    @rule(keys=keys_st, on_duplicate=st.sampled_from(["error", "replace", "skip"]))
    def append(self, keys: list[str], on_duplicate: str) -> None:
        live = self.live()
        clash = [k for k in keys if k in live]
        if clash and on_duplicate == "error":
            with pytest.raises(DuplicateKeyError) as err:
                self._commit(keys, on_duplicate=on_duplicate)
            assert sorted(err.value.keys) == sorted(clash)
            return
        tag = self._commit(keys, on_duplicate=on_duplicate)
        for k in keys:
            if k not in live or on_duplicate == "replace":
                live[k] = f"{k}@{tag}"
        self._new_version(live)

    @rule(keys=keys_st)
    def overwrite(self, keys: list[str]) -> None:
        tag = self._commit(keys, replace=True)
        self._new_version({k: f"{k}@{tag}" for k in keys})

    @precondition(lambda self: bool(self.live()))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        live = self.live()
        gone = data.draw(st.lists(st.sampled_from(sorted(live)), min_size=1, unique=True))
        assert self.cat.delete_keys(self.name, gone) == self.latest + 1
        self._new_version({k: v for k, v in live.items() if k not in gone})

    @rule(min_live=st.sampled_from([0.5, 1.0]))
    def compact(self, min_live: float) -> None:
        summary = shardcat.compact(self.cat, self.name, min_live=min_live, client=_client())
        if summary.version is not None:  # same keys, same bytes: a version like the latest
            moved = [k for k in self.live() if self.cat.locate(self.name, k).url in summary.written]
            assert len(moved) == summary.records
            self._new_version(self.live())

    @precondition(lambda self: bool(self.versions))
    @rule(data=st.data(), name=st.sampled_from(["t1", "t2"]))
    def tag(self, data: st.DataObject, name: str) -> None:
        number = data.draw(st.sampled_from(sorted(self.versions)))
        self.cat.tag(self.name, number, name, move=True)
        self.tags[name] = number

    @precondition(lambda self: bool(self.tags))
    @rule(data=st.data())
    def untag(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.tags)))
        assert self.cat.untag(self.name, name) == self.tags.pop(name)

    @rule(keep_last=st.integers(1, 3))
    def expire(self, keep_last: int) -> None:
        newest = sorted(self.versions, reverse=True)
        kept = set(newest[:keep_last]) | set(self.tags.values()) | {self.latest}
        expected = sorted(n for n in self.versions if n not in kept)
        result = self.cat.expire(self.name, keep_last=keep_last)
        assert sorted(result.expired) == expected
        for n in expected:
            del self.versions[n]

    @rule()
    def collect(self) -> None:
        gc(self.cat, self.name, grace=dt.timedelta(0))
        # Nothing unregistered is left, and every file a live row names is there.
        on_disk = {os.path.join(self.root, f) for f in os.listdir(self.root) if f != "_versions"}
        named = self.cat.shard_urls(states=["staged", "committed"], dataset=self.name)
        assert on_disk == named

    # --- invariants ------------------------------------------------------

    @invariant()
    def every_key_at_every_kept_version(self) -> None:
        if not hasattr(self, "cat"):
            return
        kept = [v.number for v in self.cat.log(self.name)]
        assert sorted(kept) == sorted(self.versions)
        asked: list[tuple[int | str | None, dict[str, str]]] = [(None, self.live())]
        asked += [(n, state) for n, state in self.versions.items()]
        asked += [(name, self.versions[n]) for name, n in self.tags.items()]
        for version, state in asked:
            batch = self.cat.get_many(self.name, UNIVERSE, version=version)
            got = {k: r["txt"].decode() for k, r in batch.found().items()}
            assert got == state, (version, got, state)
        assert self.cat.count(self.name) == len(self.live())
        dataset_id = self.cat.info(self.name).id
        with self.cat._uow() as s:  # no committed shard that no kept version reads
            assert unreferenced_shards(s, dataset_id) == []


TestVersionModelSQLite, _pg_model, TestVersionModelPostgres = machine_cases(
    VersionModel, (25, 15), (8, 12)
)
