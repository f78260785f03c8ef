"""Revision 0008: the views of what versions see, created with a new catalog or by an upgrade.

The views' SQL is generated from ``catalog/visibility.py`` (``catalog/views.py``);
the migration holds a frozen copy of it. These tests check the copy is the
text, that a catalog upgraded with data gets the same views as a new one and
that they answer at once, and that ``shardcat sql`` reads them. That the views
return what every read path sees on random histories is checked by the
history machine of test_visibility.py.
"""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import sqlalchemy as sa
from typer.testing import CliRunner

from shardcat.catalog import downgrade, head_revision, migrate, upgrade, views
from shardcat.catalog.readonly import run_read_only
from shardcat.cli.app import app
from shardcat.reading import Catalog

from .test_docs import history


def _migration(name: str) -> Any:
    path = migrate.migrations_dir() / "versions" / name
    spec = importlib.util.spec_from_file_location(f"shardcat_migration_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _frozen_views() -> dict[str, str]:
    """The views as the migrations leave them: 0008's, with 0019's record views."""
    return {
        **_migration("0008_version_views.py").VIEWS,
        **_migration("0019_views_key_sorted.py").VIEWS,
    }


def _view_definitions(url: str) -> dict[str, str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            inspector = sa.inspect(conn)
            return {
                name: inspector.get_view_definition(name) for name in inspector.get_view_names()
            }
    finally:
        engine.dispose()


def test_the_migration_holds_the_text_generated_from_the_rule():
    """A change of visibility.py changes the views: this fails until a migration replaces them."""
    assert views.definitions() == _frozen_views()
    # 0013's downgrade puts back the record views of 0008.
    previous = _migration("0013_group_views.py").PREVIOUS
    assert previous == {k: _migration("0008_version_views.py").VIEWS[k] for k in previous}
    # 0019's downgrade puts back 0013's.
    assert (
        _migration("0019_views_key_sorted.py").PREVIOUS == _migration("0013_group_views.py").VIEWS
    )
    assert list(views.definitions()) == list(views.VIEW_NAMES)


def test_the_views_render_the_rule_of_visibility_py():
    from shardcat.catalog import visibility

    text = views.definitions()
    assert text["live_records"].endswith(
        f"WHERE {visibility.sql(visibility.live, 'records AS r', 'shards AS s')}"
    )
    assert text["records_at"].endswith(
        f"WHERE {visibility.sql(visibility.visible_at, 'records AS r', 'shards AS s', 'v.number')}"
    )
    assert text["shards_at"].endswith(
        f"WHERE {visibility.sql(visibility.shard_visible_at, 'shards AS s', 'v.number')}"
    )


def _answers(url: str) -> list[Any]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [
                conn.execute(sa.text(q)).all()
                for q in (
                    "SELECT dataset, key, shard_url FROM live_records ORDER BY dataset, shard_url, key",
                    "SELECT dataset, url FROM live_shards ORDER BY dataset, url",
                    "SELECT dataset, version, key, shard_url FROM records_at "
                    "ORDER BY dataset, version, shard_url, key",
                    "SELECT dataset, version, url FROM shards_at ORDER BY dataset, version, url",
                )
            ]
    finally:
        engine.dispose()


def test_an_upgraded_catalog_gets_the_views_of_a_new_one(catalog_url, local_root):
    with Catalog(catalog_url) as cat:
        history(cat, local_root)
    created = _view_definitions(catalog_url)
    assert set(created) == set(views.VIEW_NAMES)
    before = _answers(catalog_url)
    assert len(before[0]) == 6 and len(before[3]) == 11  # train 5 + val 1; shards per version

    downgrade(catalog_url, "0007")  # a catalog made before the views, with its data
    assert _view_definitions(catalog_url) == {}
    assert upgrade(catalog_url) == ("0007", head_revision())
    assert _view_definitions(catalog_url) == created
    assert _answers(catalog_url) == before
    with Catalog(catalog_url) as cat:  # and it opens at head
        assert sorted(cat.keys("val")) == ["x1"]


def test_shardcat_sql_reads_the_views(catalog_url, local_root):
    with Catalog(catalog_url) as cat:
        history(cat, local_root)
        result = run_read_only(
            cat.engine,
            "SELECT count(*) FROM live_records WHERE dataset = 'train' AND key = 'img/00000007'",
        )
        assert result.rows == ((1,),)
    out = CliRunner().invoke(
        app,
        [
            "--catalog",
            catalog_url,
            "--json",
            "sql",
            "SELECT version, count(*) AS n FROM records_at WHERE dataset = 'train' "
            "GROUP BY version ORDER BY version",
        ],
    )
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)["rows"]
    assert rows == [{"version": v, "n": n} for v, n in [(1, 4), (2, 6), (3, 6), (4, 5)]]
