"""Layer 1 of ``shardcat sql``: exactly one read statement, told apart from quoted text and comments."""

from __future__ import annotations

import re

from ...errors import QueryRefusedError

__all__ = ["NAMEDATALEN", "READ_ONLY_VERBS", "check_read_only", "parse"]

READ_ONLY_VERBS = ("select", "with", "explain", "values")
NAMEDATALEN = 63  # PostgreSQL cuts longer identifiers to this many bytes

_VERB = re.compile(r"[\s(]*([A-Za-z_][A-Za-z0-9_$]*)")
_DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")


def _is_identifier_char(c: str) -> bool:
    return c.isalnum() or c in "_$" or ord(c) > 127


def _code(query: str, dialect: str) -> str:
    """The query with quoted text as ``x`` and comments as spaces, position for position.

    Unterminated quotes or comments raise. PostgreSQL's dollar quotes and
    ``E'...'`` strings (where a backslash escapes the next character) are
    understood there; block comments end at the first ``*/`` (even where
    PostgreSQL nests them), which can only make more text count as code, so
    the checks err towards refusing.
    """
    out: list[str] = []
    i, n = 0, len(query)
    postgres = dialect == "postgresql"
    while i < n:
        c = query[i]
        if c in "'\"`" or (c == "[" and dialect == "sqlite"):
            close = "]" if c == "[" else c
            # E'...' (PostgreSQL): the E starts a token, it does not end a name like `name'`.
            escapes = (
                postgres
                and c == "'"
                and i > 0
                and query[i - 1] in "eE"
                and (i == 1 or not _is_identifier_char(query[i - 2]))
            )
            j = i + 1
            while True:
                if escapes:
                    while j < n and query[j] not in "\\'":
                        j += 1
                    if j < n and query[j] == "\\":
                        j += 2
                        continue
                    j = j if j < n else -1
                else:
                    j = query.find(close, j)
                if j < 0 or j >= n:
                    raise QueryRefusedError("refused: the query has an unterminated quote")
                if close != "]" and query.startswith(close * 2, j):  # '' escapes a quote
                    j += 2
                    continue
                break
            out.append("x" * (j + 1 - i))
            i = j + 1
        elif query.startswith("--", i):
            j = query.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif query.startswith("/*", i):
            j = query.find("*/", i + 2)
            if j < 0:
                raise QueryRefusedError("refused: the query has an unterminated /* comment")
            out.append(" " * (j + 2 - i))
            i = j + 2
        elif c == "$" and postgres and (m := _DOLLAR_TAG.match(query, i)):
            prev = query[i - 1] if i else " "
            if prev.isalnum() or prev == "_":  # part of a name like a$b$, not a quote
                out.append(c)
                i += 1
                continue
            j = query.find(m.group(0), m.end())
            if j < 0:
                raise QueryRefusedError("refused: the query has an unterminated dollar quote")
            j += len(m.group(0))
            out.append("x" * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse(query: str, dialect: str) -> tuple[str, str]:
    code = _code(query, dialect)
    end = len(code.rstrip())
    while end and code[end - 1] == ";":
        end = len(code[: end - 1].rstrip())
    body = code[:end]
    if ";" in body:
        raise QueryRefusedError("refused: shardcat sql runs one statement at a time")
    m = _VERB.match(body)
    verb = m.group(1).lower() if m else ""
    if not body.strip():
        raise QueryRefusedError("refused: the query is empty")
    if verb not in READ_ONLY_VERBS:
        shown = verb.upper() or body.strip()[:20]
        raise QueryRefusedError(
            f"refused: {shown} statements are not allowed; shardcat sql is read-only "
            "(one SELECT, WITH, EXPLAIN or VALUES statement)"
        )
    return query[:end], verb


def check_read_only(query: str, dialect: str = "sqlite") -> str:
    """The statement, if it is one SELECT, WITH, EXPLAIN or VALUES (trailing ``;`` dropped).

    This is the first guard of several (see the module docstring): the
    statement also runs in a read-only transaction, which stops writes
    hidden inside an allowed statement (``WITH x AS (DELETE ...) SELECT``,
    ``EXPLAIN ANALYZE DELETE``).

    Raises
    ------
    QueryRefusedError
        If the text is empty, holds several statements, or starts with another verb.
    """
    return parse(query, dialect)[0]
