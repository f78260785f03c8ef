"""Layer 3 of ``shardcat sql`` (PostgreSQL): no function with side effects, named anywhere."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ...errors import QueryRefusedError
from .statement import NAMEDATALEN

if TYPE_CHECKING:
    import psycopg

__all__ = ["SAFE_VOLATILE_FUNCTIONS", "refuse_side_effects"]

SAFE_VOLATILE_FUNCTIONS = frozenset(
    {
        # VOLATILE because each call returns something new, not because of a side effect.
        "random",
        "random_normal",
        "clock_timestamp",
        "timeofday",
        "gen_random_uuid",
        "uuid_generate_v1",
        "uuid_generate_v1mc",
        "uuid_generate_v4",
        "current_query",
        # The TABLESAMPLE methods: `TABLESAMPLE SYSTEM (10)` names them; they take
        # an `internal` argument, so SQL cannot call them.
        "bernoulli",
        "system",
    }
)
"""VOLATILE functions :func:`run_read_only` lets through (when a superuser owns them)."""

# A word as PostgreSQL reads an identifier (letters, digits, _ and $; no leading digit).
_WORD = re.compile(r"[^\W\d][\w$]*")
_UNICODE_IDENTIFIER = re.compile(r"[uU]&\"")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


# `mentioned(x)`: the name appears in the statement as a word (as written, with ASCII
# folded to lower case, or cut to 63 bytes as the server does), or, for a name with
# other characters (a quoted "Name"), anywhere in the text.
_MENTIONED = (
    "({0} = ANY(%(words)s) OR ({0} !~ '^[a-z_][a-z0-9_$]*$' "
    "AND strpos(lower(%(text)s), lower({0})) > 0))"
)

_SIDE_EFFECTS_SQL = f"""
WITH unsafe AS (
    SELECT p.oid, p.proname,
           CASE WHEN NOT o.rolsuper
                THEN 'owned by ' || quote_ident(o.rolname)
                     || ', not a superuser: its volatility label is not trusted'
                ELSE 'VOLATILE: it may have side effects' END AS why
    FROM pg_proc p JOIN pg_roles o ON o.oid = p.proowner
    WHERE NOT o.rolsuper OR (p.provolatile = 'v' AND p.proname <> ALL(%(safe)s))
)
SELECT 'function ' || u.proname, u.why FROM unsafe u
WHERE {_MENTIONED.format("u.proname")}
UNION
SELECT 'operator ' || o.oprname || ' (function ' || u.proname || ')', u.why
FROM pg_operator o JOIN unsafe u ON u.oid = o.oprcode
WHERE strpos(%(text)s, o.oprname) > 0
ORDER BY 1
LIMIT 5
"""

# The views a text names, with their definitions: a view's functions run when it is read.
# The server's own views (pg_stat_activity, ...) are left out: their definitions are the server's.
_VIEWS_SQL = f"""
SELECT c.oid, c.oid::regclass::text, pg_get_viewdef(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'v' AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND {_MENTIONED.format("c.relname")}
"""
_MAX_VIEW_DEPTH = 16


def _words(text: str) -> list[str]:
    """Every word of ``text`` in each form PostgreSQL could resolve it to."""
    words: set[str] = set()
    for m in _WORD.finditer(text):
        w = m.group(0)
        for form in (w, w.translate(_ASCII_LOWER)):
            words.add(form)
            raw = form.encode()
            if len(raw) > NAMEDATALEN:
                words.add(raw[:NAMEDATALEN].decode("utf-8", "ignore"))
    return sorted(words)


def _with_views(cur: psycopg.Cursor[Any], text: str) -> tuple[str, list[str]]:
    """``text`` followed by the definitions of the views it reads (and theirs), and their names.

    Dependencies cannot tell: PostgreSQL records none on its own functions
    (they are pinned), so a view calling ``pg_read_file`` lists no function.
    """
    seen: set[int] = set()
    names: list[str] = []
    pending = text
    for _ in range(_MAX_VIEW_DEPTH):
        rows = cur.execute(_VIEWS_SQL, {"words": _words(pending), "text": pending}).fetchall()
        new = [r for r in rows if r[0] not in seen]
        if not new:
            break
        seen.update(r[0] for r in new)
        names += [r[1] for r in new]
        pending = "\n".join(r[2] or "" for r in new)
        text = f"{text}\n{pending}"
    return text, names


def refuse_side_effects(cur: psycopg.Cursor[Any], statement: str) -> None:
    """Refuse a statement that names a function with side effects (layer 3).

    The names are looked for in the whole text, strings and comments
    included, and in the definitions of the views it reads: no quoting or
    commenting trick can hide one from this check, at the price of refusing
    a string that merely contains such a name.
    """
    if _UNICODE_IDENTIFIER.search(statement):
        # U&"\0070g_sleep" spells a name in escapes; nobody needs that for the catalog.
        raise QueryRefusedError(
            'refused: shardcat sql does not accept U&"..." identifiers; write names plainly'
        )
    text, views = _with_views(cur, statement)
    cur.execute(
        _SIDE_EFFECTS_SQL,
        {"words": _words(text), "text": text, "safe": sorted(SAFE_VOLATILE_FUNCTIONS)},
    )
    hits = cur.fetchall()
    if hits:
        named = "; ".join(f"{what} ({why})" for what, why in hits)
        through = f" (with the views it reads: {', '.join(views)})" if views else ""
        raise QueryRefusedError(
            f"refused: the query{through} names {named}; shardcat sql runs only functions "
            "PostgreSQL marks STABLE or IMMUTABLE, and random(), clock_timestamp() and a few "
            "more (names count anywhere in the text, strings and comments included)"
        )
