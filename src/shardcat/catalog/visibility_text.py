"""What :func:`.visibility.sql` renders for the lookup's statements, kept as text.

:mod:`.visibility` is the one definition of what a version sees; rendering
it needs SQLAlchemy, about 0.2 s of a ``shardcat get`` that otherwise
loads none. So the statements run as text on a lookup's connection
(``reading/statements.py``) take the rendered text from this table. ``tests/catalog/test_visibility_text.py``
renders every entry again and fails, printing the new table, when a rule
changes; a rendering not in the table is made on the spot (SQLAlchemy loads).
"""

from __future__ import annotations

__all__ = ["RENDERED", "sql"]

RENDERED: dict[tuple[str, ...], str] = {
    ("live", "records AS r", "shards AS s"): (
        "s.state = 'committed' AND r.removed_version IS NULL"
    ),
    ("committed", "shards AS s"): ("s.state = 'committed'"),
    ("shard_live", "shards AS s"): ("s.state = 'committed' AND s.removed_version IS NULL"),
    ("visible_at_kept", "records AS r", "shards AS s", "?"): (
        "s.state = 'committed' AND s.added_version <= ? AND (r.removed_version IS NULL OR r.removed_version > ?) AND (EXISTS (SELECT 1 FROM dataset_versions AS dv WHERE dv.dataset_id = r.dataset_id AND dv.number = ?))"
    ),
    (
        "visible_at",
        "records AS r",
        "shards AS s",
        "(SELECT t.version FROM dataset_tags t WHERE t.dataset_id = r.dataset_id AND t.name = ?)",
    ): (
        "s.state = 'committed' AND s.added_version <= (SELECT t.version FROM dataset_tags t WHERE t.dataset_id = r.dataset_id AND t.name = ?) AND (r.removed_version IS NULL OR r.removed_version > (SELECT t.version FROM dataset_tags t WHERE t.dataset_id = r.dataset_id AND t.name = ?))"
    ),
    ("visible_at_kept", "records AS r", "shards AS s", "%s"): (
        "s.state = 'committed' AND s.added_version <= %s AND (r.removed_version IS NULL OR r.removed_version > %s) AND (EXISTS (SELECT 1 FROM dataset_versions AS dv WHERE dv.dataset_id = r.dataset_id AND dv.number = %s))"
    ),
    (
        "visible_at",
        "records AS r",
        "shards AS s",
        "(SELECT t.version FROM dataset_tags t WHERE t.dataset_id = r.dataset_id AND t.name = %s)",
    ): (
        "s.state = 'committed' AND s.added_version <= (SELECT t.version FROM dataset_tags t WHERE t.dataset_id = r.dataset_id AND t.name = %s) AND (r.removed_version IS NULL OR r.removed_version > (SELECT t.version FROM dataset_tags t WHERE t.dataset_id = r.dataset_id AND t.name = %s))"
    ),
}
"""``(rule name, *operands)``: the text ``visibility.sql(rule, *operands)`` renders."""


def sql(rule: str, *operands: str) -> str:
    """``visibility.sql(visibility.<rule>, *operands)``, from the table when it is there."""
    text = RENDERED.get((rule, *operands))
    if text is None:
        from . import visibility  # a statement the table lacks: render it (SQLAlchemy loads)

        text = visibility.sql(getattr(visibility, rule), *operands)
    return text
