"""The rendered visibility table is what visibility.py renders: one rule, kept as text for lookups."""

from __future__ import annotations

import pprint

from shardcat.catalog import visibility, visibility_text
from shardcat.reading import statements


def test_every_rendered_entry_is_what_the_rule_renders_today():
    stale = {
        key: fresh
        for key, text in visibility_text.RENDERED.items()
        if (fresh := visibility.sql(getattr(visibility, key[0]), *key[1:])) != text
    }
    assert not stale, (
        "catalog/visibility_text.py is out of date with visibility.py; these entries now render as:\n"
        + pprint.pformat(stale, width=100)
    )


def test_the_lookup_statements_take_every_rendering_from_the_table(monkeypatch):
    # A rendering missing from the table would load SQLAlchemy on every lookup's first statement.
    asked = []
    real = visibility.sql
    monkeypatch.setattr(visibility, "sql", lambda *a: asked.append(a) or real(*a))
    for p in ("?", "%s"):
        statements.visible_at(p, None)
        statements.visible_at(p, 3)
        statements.visible_at(p, "release")
    assert asked == []


def test_a_rendering_not_in_the_table_is_made_on_the_spot():
    assert visibility_text.sql("visible_at_kept", "records AS r", "shards AS s", ":v") == (
        visibility.sql(visibility.visible_at_kept, "records AS r", "shards AS s", ":v")
    )
