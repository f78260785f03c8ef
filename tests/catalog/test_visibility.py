"""What a version sees, written once (``catalog/visibility.py``), checked everywhere it is used.

The unit tests pin the rendered text (the point lookup prepares exactly it)
and check it against the SQL docs/LIFECYCLE.md shows. The history test is a
hypothesis state machine on SQLite and PostgreSQL: random appends (each
``on_duplicate``), overwrites, deletes, shard removals, compactions, tags
and expiries, and after every step, at every kept version, tag and the
latest, ``get``/``locate``/``get_many``/``select``/``entry_kinds``/
``visible_shards``/``keys``/``count``, the version log's totals, ``diff``
between kept versions, the rule as a Core expression and the views users
query (``records_at``/``shards_at`` at each kept version, ``live_records``/
``live_shards``) all agree with a Python model of the versions, and the rule
evaluated in Python over the raw rows agrees with the SQL.
"""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule
from sqlalchemy import select, text

import shardcat
from shardcat.catalog import internal, visibility
from shardcat.catalog.models import Record, Shard
from shardcat.errors import DuplicateKeyError, KeyNotFoundError
from shardcat.reading import Catalog
from shardcat.reading.lookup import LayoutCache, Lookup

from .helpers import CatalogMachine, machine_cases
from .test_version_model import _client

DOCS = Path(__file__).resolve().parents[2] / "docs"
UNIVERSE = [f"k{i}" for i in range(6)]
keys_st = st.lists(st.sampled_from(UNIVERSE), min_size=1, max_size=4, unique=True)


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_rule_renders_as_the_documented_sql() -> None:
    lifecycle = _flat((DOCS / "LIFECYCLE.md").read_text())
    at = visibility.sql(visibility.visible_at, "records AS r", "shards AS s", ":n")
    assert at == (
        "s.state = 'committed' AND s.added_version <= :n "
        "AND (r.removed_version IS NULL OR r.removed_version > :n)"
    )
    assert at in lifecycle
    latest = visibility.sql(visibility.live, "records AS r", "shards AS s")
    assert latest == "s.state = 'committed' AND r.removed_version IS NULL"
    assert latest in lifecycle


def test_rendered_once_and_grouped_for_an_and() -> None:
    first = visibility.sql(visibility.changed_since, "records AS o", "shards AS s", ":base")
    assert first is visibility.sql(visibility.changed_since, "records AS o", "shards AS s", ":base")
    # An OR at the top is parenthesised: the text is always put in as ``... AND {text}``.
    assert first == "(s.added_version > :base OR o.removed_version > :base)"
    assert visibility.sql(visibility.not_removed, "records") == "records.removed_version IS NULL"
    kept = visibility.sql(visibility.visible_at_kept, "records AS r", "shards AS s", "?")
    # The kept-version subquery correlates to the statement's ``r``, not a table of its own.
    assert "FROM dataset_versions AS dv WHERE dv.dataset_id = r.dataset_id" in kept
    assert "records AS r" not in kept


def test_the_point_lookup_prepares_the_rule(tmp_path: Any) -> None:
    cat = Catalog(f"sqlite:///{tmp_path}/c.db")
    try:
        lookup = Lookup(cat.engine, None, LayoutCache())
        latest = visibility.sql(visibility.live, "records AS r", "shards AS s")
        for statement in (lookup._point, lookup._record, lookup._record_by_shard, lookup._batch):
            assert statement.endswith(f" AND {latest}"), statement
        at, _ = lookup._sql("point", 3)
        assert at.endswith(
            visibility.sql(visibility.visible_at_kept, "records AS r", "shards AS s", "?")
        )
        lookup.close()
    finally:
        cat.close()


# --- the history -------------------------------------------------------------

Model = dict[str, tuple[str, str]]
"""key -> (payload, shard URL): the record a version serves for the key."""


def _python_visible(added: int | None, state: str, removed: int | None, version: int) -> bool:
    """docs/LIFECYCLE.md §1 in Python, the test's own reading of the rule."""
    return (
        state == "committed"
        and added is not None
        and added <= version
        and (removed is None or removed > version)
    )


class VisibilityHistory(CatalogMachine):
    """The catalog's every read path against ``versions``: number -> Model of every kept version."""

    @initialize()
    def start(self) -> None:
        self.open_dataset("vis")
        self.versions: dict[int, Model] = {}
        self.tags: dict[str, int] = {}
        self.latest = 0
        self.steps = itertools.count()

    def live(self) -> Model:
        return dict(self.versions.get(self.latest, {}))

    def _new_version(self, state: Model) -> None:
        self.latest += 1
        self.versions[self.latest] = state
        assert self.cat.info(self.name).version == self.latest

    def _commit(self, keys: list[str], **kw: Any) -> tuple[str, str]:
        step = f"s{next(self.steps)}"
        job = self.cat.begin_job(self.name)
        path = os.path.join(self.root, f"{step}.shard")
        with shardcat.ShardWriter(path) as w:
            for k in keys:
                w.add(k, {"txt": f"{k}@{step}"})
        row = self.cat.register_shard(self.name, w.close(), job=job)
        try:
            self.cat.commit_job(job, **kw)
        except DuplicateKeyError:
            self.cat.abort_job(job)
            raise
        return step, row.url

    # --- rules -------------------------------------------------------------

    @rule(keys=keys_st, on_duplicate=st.sampled_from(["error", "replace", "skip"]))
    def append(self, keys: list[str], on_duplicate: str) -> None:
        live = self.live()
        if on_duplicate == "error" and any(k in live for k in keys):
            with pytest.raises(DuplicateKeyError):
                self._commit(keys, on_duplicate=on_duplicate)
            return
        step, url = self._commit(keys, on_duplicate=on_duplicate)
        for k in keys:
            if k not in live or on_duplicate == "replace":
                live[k] = (f"{k}@{step}", url)
        self._new_version(live)

    @rule(keys=keys_st)
    def overwrite(self, keys: list[str]) -> None:
        step, url = self._commit(keys, replace=True)
        self._new_version({k: (f"{k}@{step}", url) for k in keys})

    @precondition(lambda self: bool(self.live()))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        live = self.live()
        gone = data.draw(st.lists(st.sampled_from(sorted(live)), min_size=1, unique=True))
        self.cat.delete_keys(self.name, gone)
        self._new_version({k: v for k, v in live.items() if k not in gone})

    @precondition(lambda self: bool(self.live()))
    @rule(data=st.data())
    def remove_shard(self, data: st.DataObject) -> None:
        live = self.live()
        url = data.draw(st.sampled_from(sorted({u for _, u in live.values()})))
        self.cat.remove_shard(self.name, url)
        self._new_version({k: v for k, v in live.items() if v[1] != url})

    @rule()
    def compact(self) -> None:
        summary = shardcat.compact(self.cat, self.name, min_live=1.0, client=_client())
        if summary.version is None:
            return
        live = self.live()
        moved = {}
        for k, (payload, _) in live.items():
            url = self.cat.locate(self.name, k).url
            if url in summary.written:
                moved[k] = (payload, url)
        assert len(moved) == summary.records
        self._new_version({**live, **moved})

    @precondition(lambda self: bool(self.live()))
    @rule(data=st.data(), replace=st.booleans())
    def compact_racing(self, data: st.DataObject, replace: bool) -> None:
        """Another commit deletes or replaces a key after the compaction read it, before it commits.

        The compaction's commit decides what goes live with the rule, inside its
        transaction: the other commit's change stands, nothing comes back.
        """
        live = self.live()
        # A key the compaction rewrites: in a shard some of whose records are no longer live.
        in_file = {row.url: row.record_count for row in self.cat.shards(self.name)}
        urls = [u for _, u in live.values()]
        rewritten = sorted(k for k, (_, u) in live.items() if urls.count(u) < in_file[u])
        victim = data.draw(st.sampled_from(rewritten or sorted(live)))
        real = self.cat.commit_job
        raced: list[Model] = []

        def commit_job(job: Any, **kw: Any) -> Any:
            if kw.get("operation") == "compact" and not raced:
                raced.append({})
                if replace:
                    step, url = self._commit([victim], on_duplicate="replace")
                    raced[0] = {**live, victim: (f"{victim}@{step}", url)}
                else:
                    self.cat.delete_keys(self.name, [victim])
                    raced[0] = {k: v for k, v in live.items() if k != victim}
                self._new_version(raced[0])
            return real(job, **kw)

        self.cat.commit_job = commit_job  # type: ignore[method-assign]
        try:
            summary = shardcat.compact(self.cat, self.name, min_live=1.0, client=_client())
        finally:
            del self.cat.commit_job
        if summary.version is None:
            return
        state = raced[0]
        moved = {}
        for k, (payload, _) in state.items():
            url = self.cat.locate(self.name, k).url
            if url in summary.written:
                moved[k] = (payload, url)
        assert len(moved) == summary.records
        self._new_version({**state, **moved})

    @precondition(lambda self: bool(self.versions))
    @rule(data=st.data(), name=st.sampled_from(["t1", "t2"]))
    def tag(self, data: st.DataObject, name: str) -> None:
        number = data.draw(st.sampled_from(sorted(self.versions)))
        self.cat.tag(self.name, number, name, move=True)
        self.tags[name] = number

    @rule(keep_last=st.integers(1, 3))
    def expire(self, keep_last: int) -> None:
        newest = sorted(self.versions, reverse=True)
        kept = set(newest[:keep_last]) | set(self.tags.values()) | {self.latest}
        self.cat.expire(self.name, keep_last=keep_last)
        for n in [n for n in self.versions if n not in kept]:
            del self.versions[n]

    # --- every read path against the model -------------------------------------

    def _check_version(self, version: int | str | None, state: Model) -> None:
        cat, name = self.cat, self.name
        payloads = {k: p for k, (p, _) in state.items()}
        for k in UNIVERSE:
            if k in state:
                assert cat.get(name, k, version=version)["txt"].decode() == state[k][0]
                assert cat.locate(name, k, version=version).url == state[k][1]
            else:
                with pytest.raises(KeyNotFoundError):
                    cat.get(name, k, version=version)
        found = cat.get_many(name, UNIVERSE, version=version).found()
        assert {k: r["txt"].decode() for k, r in found.items()} == payloads, version
        chosen = cat.select(name, "1 = 1", version=version)
        assert sorted(k for keys in chosen.keys.values() for k in keys) == sorted(state)
        assert sum(e.record_count for e in cat.entry_kinds(name, version=version)) == len(state)
        _, shards = internal.visible_shards(cat, name, version)
        assert sum(s.record_count - len(hidden) for s, hidden in shards) == len(state)
        assert {s.url for s, _ in shards} == {u for _, u in state.values()}

    def _check_sql(self, number: int, state: Model) -> None:
        """The rule as a Core expression, and in Python over the raw rows, against the model."""
        dataset_id = self.cat.info(self.name).id
        with self.cat._uow() as s:
            keys = s.execute(
                select(Record.key)
                .join(Shard, Shard.id == Record.shard_id)
                .where(
                    Record.dataset_id == dataset_id, visibility.visible_at(Record, Shard, number)
                )
            ).scalars()
            assert sorted(keys) == sorted(state)
            rows = s.execute(
                select(Record.key, Shard.added_version, Shard.state, Record.removed_version)
                .join(Shard, Shard.id == Record.shard_id)
                .where(Record.dataset_id == dataset_id)
            ).all()
        by_python = [k for k, a, st_, r in rows if _python_visible(a, st_, r, number)]
        assert sorted(by_python) == sorted(state)
        # The views users query (docs/CATALOG.md §12.1), generated from the same rule.
        self._check_views("records_at", "shards_at", state, number)

    def _check_views(self, records: str, shards: str, state: Model, number: int | None) -> None:
        at = "" if number is None else f" AND version = {int(number)}"
        dataset_id = self.cat.info(self.name).id
        with self.cat.engine.connect() as conn:
            rows = conn.execute(
                text(f"SELECT key, shard_url FROM {records} WHERE dataset_id = :d{at}"),
                {"d": dataset_id},
            ).all()
            urls = conn.execute(
                text(f"SELECT url FROM {shards} WHERE dataset = :n{at}"), {"n": self.name}
            ).scalars()
            assert sorted(urls) == sorted({u for _, u in state.values()}), (shards, number)
        assert sorted(map(tuple, rows)) == sorted((k, u) for k, (_, u) in state.items()), number

    @invariant()
    def every_read_agrees_at_every_version(self) -> None:
        if not hasattr(self, "cat"):
            return
        log = {v.number: v for v in self.cat.log(self.name)}
        assert sorted(log) == sorted(self.versions)
        for number, state in self.versions.items():
            self._check_version(number, state)
            self._check_sql(number, state)
            assert log[number].total_records == len(state)
        for tag, number in self.tags.items():
            if number in self.versions:
                self._check_version(tag, self.versions[number])
        live = self.live()
        self._check_version(None, live)
        assert list(self.cat.keys(self.name)) == sorted(live)
        assert self.cat.count(self.name) == len(live)
        with self.cat._uow() as s:
            latest = s.execute(
                select(Record.key)
                .join(Shard, Shard.id == Record.shard_id)
                .where(
                    Record.dataset_id == self.cat.info(self.name).id,
                    visibility.live(Record, Shard),
                )
            ).scalars()
            assert sorted(latest) == sorted(live)
        self._check_views("live_records", "live_shards", live, None)
        # Diffs between consecutive kept versions: what the model says changed.
        kept = sorted(self.versions)
        for old, new in itertools.pairwise(kept):
            a, b = self.versions[old], self.versions[new]
            diff = self.cat.diff(self.name, old, new, keys=True)
            assert diff.added_keys == sorted(set(b) - set(a))
            assert diff.removed_keys == sorted(set(a) - set(b))
            assert diff.replaced_keys == sorted(k for k in set(a) & set(b) if a[k] != b[k])


TestVisibilityHistorySQLite, _pg_history, TestVisibilityHistoryPostgres = machine_cases(
    VisibilityHistory, (20, 12), (6, 10)
)


def test_no_hand_written_copy_of_the_rule() -> None:
    """Outside visibility.py no module writes a visibility condition, as SQL text or an expression.

    (``testing/history/bugs.py`` plants wrong ones on purpose; the partial index's
    ``removed_version IS NOT NULL`` in models.py is the schema's, not a rule.)
    """
    src = Path(shardcat.__file__).parent
    pattern = re.compile(
        r"removed_version (IS|>|<|<=) |removed_version\.is_|added_version (<|<=|>) "
        r"|state = 'committed'|Shard\.state == \"committed\""
    )
    offenders = []
    for path in sorted(src.rglob("*.py")):
        # visibility_text.py holds the rule's renderings, checked against it
        # (tests/catalog/test_visibility_text.py): derived, not written by hand.
        if path.name in ("visibility.py", "visibility_text.py") or "testing" in path.parts:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if "_where=text(" in code or "``" in code:  # the index's DDL; prose
                continue
            if pattern.search(code):
                offenders.append(f"{path.relative_to(src)}:{n}: {line.strip()}")
    assert offenders == []
