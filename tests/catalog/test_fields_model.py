"""update_fields against a model: every kept version's field values, as ``where=`` reads them.

The model is ``versions``: number -> {key: {field: value}} for every kept
version (a key absent: no live record; a field absent: NULL). Updates, unsets,
deletions, a second shard's keys, stored values indexed again and expiry run
in any order; after each step every kept version filters exactly as the model
says, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule
from sqlalchemy import text

from shardcat.errors import UnknownKeysError

from .helpers import CatalogMachine, machine_cases, write_shard

UNIVERSE = [f"k{i}" for i in range(8)]
LABELS = [0, 1, 2]
SPLITS = ["a", "b"]

keys_st = st.lists(st.sampled_from(UNIVERSE), min_size=1, max_size=4, unique=True)
label_st = st.one_of(st.none(), st.sampled_from(LABELS))
split_st = st.one_of(st.none(), st.sampled_from(SPLITS))


class FieldsModel(CatalogMachine):
    @initialize()
    def start(self) -> None:
        self.open_dataset("fields")
        self.cat.register_shard(
            self.name, write_shard(f"{self.root}/a.shard", UNIVERSE[:6], shard_number=0)
        )
        self.cat.declare_fields(self.name, {"label": int, "split": str})
        # Stored with the records (as a write or index_fields does): label = index % 3.
        self.stored = {k: {"label": i % 3} for i, k in enumerate(UNIVERSE[:6])}
        self._store(UNIVERSE[:6])
        self.versions: dict[int, dict[str, dict[str, Any]]] = {
            1: {k: dict(v) for k, v in self.stored.items()}
        }
        self.first: dict[str, int] = {}  # key -> the first version that updated its label

    def _store(self, keys: list[str]) -> None:
        shard = next(s for s in self.cat.shards(self.name, state=None) if s.url.endswith("a.shard"))
        with self.cat.engine.connect() as conn:
            offsets = dict(
                conn.execute(
                    text("SELECT key, byte_offset FROM records WHERE shard_id = :s"),
                    {"s": shard.id},
                ).all()
            )
        self.cat.store_fields(
            self.name, shard.id, [(offsets[k], self.stored[k]) for k in keys if k in offsets]
        )

    def _latest(self) -> dict[str, dict[str, Any]]:
        return self.versions[max(self.versions)]

    @rule(keys=keys_st, label=label_st, split=split_st, both=st.booleans(), skip=st.booleans())
    def update(self, keys: list[str], label: Any, split: Any, both: bool, skip: bool) -> None:
        values = {k: {"label": label, **({"split": split} if both else {})} for k in keys}
        latest = self._latest()
        missing = [k for k in keys if k not in latest]
        if missing and not skip:
            with pytest.raises(UnknownKeysError) as refused:
                self.cat.update_fields(self.name, values)
            assert sorted(refused.value.keys) == sorted(missing)
            return
        done = self.cat.update_fields(self.name, values, on_missing="skip" if skip else "error")
        assert done.version == max(self.versions) + 1 and done.skipped == len(missing)
        new = {k: dict(v) for k, v in latest.items()}
        for k in keys:
            if k not in new:
                continue
            self.first.setdefault(k, done.version)
            for name, value in values[k].items():
                if value is None:
                    new[k].pop(name, None)
                else:
                    new[k][name] = value
        self.versions[done.version] = new

    @rule(keys=keys_st)
    def delete(self, keys: list[str]) -> None:
        version = self.cat.delete_keys(self.name, keys, missing_ok=True)
        self.versions[version] = {k: v for k, v in self._latest().items() if k not in keys}

    @precondition(lambda self: not any(k in self._latest() for k in UNIVERSE[6:]))
    @rule()
    def add_keys(self) -> None:
        """The last two keys, in a shard of their own, without values."""
        n = max(self.versions) + 1
        info = write_shard(f"{self.root}/b{n}.shard", UNIVERSE[6:], shard_number=n)
        self.cat.register_shard(self.name, info)
        assert self.cat.info(self.name).version == n
        self.versions[n] = {**self._latest(), **{k: {} for k in UNIVERSE[6:]}}

    @rule(keys=keys_st)
    def index_again(self, keys: list[str]) -> None:
        """Stored values indexed again (label 2): the versions before a key's first update
        read them (stored values are the shard's, not versioned); later ones, the updates."""
        for k in keys:
            if k in self.stored:
                self.stored[k] = {"label": 2}
        self._store(list(self.stored))
        for number, values in self.versions.items():
            for k in keys:
                if k in values and k in self.stored and number < self.first.get(k, 1 << 40):
                    values[k]["label"] = 2

    @rule(keep=st.integers(1, 3))
    def expire(self, keep: int) -> None:
        result = self.cat.expire(self.name, keep_last=keep)
        assert sorted(result.kept) == sorted(self.versions)[-keep:]
        for number in result.expired:
            del self.versions[number]

    @invariant()
    def every_kept_version_filters_as_the_model_says(self) -> None:
        if not hasattr(self, "versions"):
            return
        for number, values in self.versions.items():
            for name, domain in (("label", LABELS), ("split", SPLITS)):
                for value in domain:
                    want = sorted(k for k, v in values.items() if v.get(name) == value)
                    assert self._chosen(f"{name} = :x", {"x": value}, number) == want, (
                        number,
                        name,
                        value,
                    )
                want = sorted(k for k, v in values.items() if v.get(name) is None)
                assert self._chosen(f"{name} IS NULL", None, number) == want, (number, name)

    def _chosen(self, where: str, params: Any, version: int) -> list[str]:
        chosen = self.cat.select(self.name, where, params, version=version)
        return sorted(k for keys in chosen.keys.values() for k in keys)


TestFieldsModelSQLite, _pg_fields_model, TestFieldsModelPostgres = machine_cases(
    FieldsModel, sqlite=(12, 10), postgres=(4, 8)
)
