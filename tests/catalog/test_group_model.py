"""A hypothesis state machine over column groups: add, fix (mode="replace"), drop, entry
replacements, base appends and deletes, against a model of every version (docs/GROUPS.md).

After every step every key is read at every version, whole (``get`` and ``get_many``, the
base and every group merged) and by one entry (``entries=``), and compared with the model.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

import shardcat
from shardcat.catalog.groups import GroupWrite
from shardcat.errors import DuplicateKeyError, EntryExistsError, UnknownKeysError

from .helpers import CatalogMachine, machine_cases

UNIVERSE = [f"k{i}" for i in range(6)]
GROUPS = ["g1", "g2", "g3"]
keys_st = st.lists(st.sampled_from(UNIVERSE), min_size=1, max_size=4, unique=True)

Sample = dict[str, str]  # entry name -> value


class GroupModel(CatalogMachine):
    """``versions``: number -> {key: {entry: value}}, the merged samples each version reads."""

    @initialize()
    def start(self) -> None:
        self.open_dataset("train")
        self.steps = itertools.count()
        self.versions: dict[int, dict[str, Sample]] = {}
        self.latest = 0
        # The latest version's parts: the base, and each live group (in creation order).
        self.base: dict[str, str] = {}
        self.groups: dict[str, dict[str, Sample]] = {}

    # --- helpers ---------------------------------------------------------

    def _merged(self) -> dict[str, Sample]:
        out: dict[str, Sample] = {k: {"b": v} for k, v in self.base.items()}
        for records in self.groups.values():  # insertion order = creation order
            for k, entries in records.items():
                if k in out:
                    out[k].update(entries)
        return out

    def _new_version(self) -> None:
        self.latest += 1
        self.versions[self.latest] = self._merged()
        assert self.cat.info(self.name).version == self.latest

    def _commit(self, samples: dict[str, Sample], **kw: Any) -> str:
        tag = f"s{next(self.steps)}"
        job = self.cat.begin_job(self.name)
        with shardcat.ShardWriter(os.path.join(self.root, f"{tag}.shard")) as w:
            for k, entries in samples.items():
                w.add(k, {name: f"{value}@{tag}" for name, value in entries.items()})
        self.cat.register_shard(self.name, w.close(), job=job)
        try:
            self.cat.commit_job(job, **kw)
        except Exception:
            self.cat.abort_job(job)
            raise
        return tag

    # --- rules -------------------------------------------------------------

    @rule(keys=keys_st)
    def append_base(self, keys: list[str]) -> None:
        if any(k in self.base for k in keys):
            with pytest.raises(DuplicateKeyError):
                self._commit({k: {"b": k} for k in keys})
            return
        tag = self._commit({k: {"b": k} for k in keys})
        self.base.update({k: f"{k}@{tag}" for k in keys})
        self._new_version()

    @rule(group=st.sampled_from(GROUPS), keys=keys_st, replace=st.booleans())
    def add_entries(self, group: str, keys: list[str], replace: bool) -> None:
        entry = f"e_{group}"
        samples = {k: {entry: k} for k in keys}
        spec = GroupWrite(group, mode="replace" if replace else "append")
        unknown = [k for k in keys if k not in self.base]
        had = self.groups.get(group, {})
        if replace and group not in self.groups:
            with pytest.raises(Exception, match="no group"):
                self._commit(samples, group=spec)
            return
        if unknown:
            with pytest.raises(UnknownKeysError) as err:
                self._commit(samples, group=spec)
            assert sorted(err.value.keys) == sorted(unknown)
            return
        if not replace and any(k in had for k in keys):
            with pytest.raises(DuplicateKeyError):
                self._commit(samples, group=spec)
            return
        tag = self._commit(samples, group=spec)
        records = self.groups.setdefault(group, {})
        for k in keys:
            records[k] = {entry: f"{k}@{tag}"}
        self._new_version()

    @precondition(lambda self: bool(self.base))
    @rule(data=st.data())
    def fix_base_entry(self, data: st.DataObject) -> None:
        """A new group replaces the base's entry ``b`` of some keys (``replace_entries``)."""
        keys = data.draw(st.lists(st.sampled_from(sorted(self.base)), min_size=1, unique=True))
        group = f"fix{next(self.steps)}"
        samples = {k: {"b": f"fixed-{k}"} for k in keys}
        with pytest.raises(EntryExistsError):
            self._commit(samples, group=GroupWrite(group))
        tag = self._commit(samples, group=GroupWrite(group, replace_entries=True))
        self.groups[group] = {k: {"b": f"fixed-{k}@{tag}"} for k in keys}
        self._new_version()

    @precondition(lambda self: bool(self.groups))
    @rule(data=st.data())
    def drop_group(self, data: st.DataObject) -> None:
        group = data.draw(st.sampled_from(sorted(self.groups)))
        assert self.cat.drop_group(self.name, group) == self.latest + 1
        del self.groups[group]
        self._new_version()

    @precondition(lambda self: bool(self.base))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        gone = data.draw(st.lists(st.sampled_from(sorted(self.base)), min_size=1, unique=True))
        assert self.cat.delete_keys(self.name, gone) == self.latest + 1
        for k in gone:  # every group's record of the key goes with it
            del self.base[k]
            for records in self.groups.values():
                records.pop(k, None)
        self._new_version()

    @rule(keys=keys_st)
    def overwrite(self, keys: list[str]) -> None:
        """A new base (an overwrite, or a folder indexed again): groups keep the keys it has."""
        tag = self._commit({k: {"b": k} for k in keys}, replace=True)
        self.base = {k: f"{k}@{tag}" for k in keys}
        for records in self.groups.values():
            for k in [k for k in records if k not in self.base]:
                del records[k]
        self._new_version()

    # --- the check ---------------------------------------------------------

    @invariant()
    def every_key_at_every_version(self) -> None:
        if not hasattr(self, "cat"):
            return
        asked: list[tuple[int | None, dict[str, Sample]]] = [(None, self._merged())]
        asked += list(self.versions.items())
        for version, state in asked:
            batch = self.cat.get_many(self.name, UNIVERSE, version=version)
            got = {k: {n: e.decode() for n, e in r.items()} for k, r in batch.found().items()}
            assert got == state, (version, got, state)
            for k, sample in state.items():
                record = self.cat.get(self.name, k, version=version)
                assert {n: e.decode() for n, e in record.items()} == sample, (version, k)
                name = sorted(sample)[-1]
                one = self.cat.get(self.name, k, entries=[name], version=version)
                assert one[name].decode() == sample[name]
        assert self.cat.count(self.name) == len(self.base)


TestGroupModelSQLite, _pg_model, TestGroupModelPostgres = machine_cases(
    GroupModel, (20, 12), (6, 10)
)
