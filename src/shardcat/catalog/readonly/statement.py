"""Layer 1 of ``shardcat sql``: exactly one read statement, as sqlglot's lexer for the dialect reads it.

Quoted text, comments, PostgreSQL's dollar quotes and ``E'...'`` strings,
SQLite's ``[names]``: each database's lexical rules are sqlglot's (the
lexer its parser uses), not re-written here. What a statement then does is
the database's to enforce (a read-only transaction, ``query_only``, a
read-only role: :mod:`.runner`); this layer only refuses text that holds
more than one statement or does not start as a read does.
"""

from __future__ import annotations

from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import TokenError
from sqlglot.tokenizer_core import Token, TokenType

from ...errors import QueryRefusedError

__all__ = ["NAMEDATALEN", "READ_ONLY_VERBS", "check_read_only", "parse"]

READ_ONLY_VERBS = ("select", "with", "explain", "values")
NAMEDATALEN = 63  # PostgreSQL cuts longer identifiers to this many bytes

# SQLAlchemy's dialect names as sqlglot spells them (others: sqlglot's generic SQL).
_SQLGLOT_DIALECTS = {"postgresql": "postgres", "sqlite": "sqlite"}


def _tokens(query: str, dialect: str) -> list[Token]:
    """``query``'s tokens as the database of ``dialect`` splits it (comments dropped)."""
    try:
        return Dialect.get_or_raise(_SQLGLOT_DIALECTS.get(dialect)).tokenize(query)
    except TokenError as e:
        # sqlglot names what it missed ("Missing ' from 1:7"); an open comment runs off the end.
        missing = str(e.__cause__ or "")
        if missing.startswith("Missing $"):
            what = "dollar quote"
        elif missing.startswith("Missing "):
            what = "quote"
        elif "/*" in query:
            what = "/* comment"
        else:
            raise QueryRefusedError(f"refused: the query does not read as SQL ({e})") from None
        raise QueryRefusedError(f"refused: the query has an unterminated {what}") from None


def parse(query: str, dialect: str) -> tuple[str, str]:
    """The one statement of ``query`` (trailing ``;`` and comments dropped) and its verb.

    Raises
    ------
    QueryRefusedError
        The text is empty, does not lex, holds several statements, or starts with another verb.
    """
    tokens = _tokens(query, dialect)
    while tokens and tokens[-1].token_type == TokenType.SEMICOLON:
        tokens.pop()
    if any(t.token_type == TokenType.SEMICOLON for t in tokens):
        raise QueryRefusedError("refused: shardcat sql runs one statement at a time")
    if not tokens:
        raise QueryRefusedError("refused: the query is empty")
    first = next((t for t in tokens if t.token_type != TokenType.L_PAREN), tokens[0])
    # The word as written: a quoted "select" or 'select' is no verb.
    word = query[first.start : first.end + 1]
    verb = word.lower() if word.isidentifier() else ""
    if verb not in READ_ONLY_VERBS:
        shown = verb.upper() or query[first.start :].strip()[:20]
        raise QueryRefusedError(
            f"refused: {shown} statements are not allowed; shardcat sql is read-only "
            "(one SELECT, WITH, EXPLAIN or VALUES statement)"
        )
    end = max(t.end for t in tokens) + 1
    return query[:end].rstrip(), verb


def check_read_only(query: str, dialect: str = "sqlite") -> str:
    """The statement, if it is one SELECT, WITH, EXPLAIN or VALUES (trailing ``;`` dropped).

    This is the first guard of several (see the package docstring): the
    statement also runs in a read-only transaction, which stops writes
    hidden inside an allowed statement (``WITH x AS (DELETE ...) SELECT``,
    ``EXPLAIN ANALYZE DELETE``).

    Raises
    ------
    QueryRefusedError
        If the text is empty, holds several statements, or starts with another verb.
    """
    return parse(query, dialect)[0]
