"""Layer 0 of ``where=``: one boolean SQL expression over named columns, parsed and re-written.

A filter (``where=`` of the readers, :meth:`Catalog.select
<shardcat.Catalog.select>`) is text a person wrote that becomes
part of a statement. Pasting it in lets it close the statement's
parenthesis and go on (``1=0) UNION ALL SELECT ...``), so it is parsed by
sqlglot into a tree instead, every node of the tree is checked against an
allow-list, and the statement that runs is generated from the checked tree:
literals are quoted by the generator, comments dropped, so no reading of
the text by the database can differ from what was checked.

Allowed (:data:`FILTER_FUNCTIONS`, :data:`FILTER_TYPES`, docs/TRAINING.md):

- the given columns, unqualified or as ``sample.column``; ``:name``
  placeholders bound from ``params``; ``'...'`` strings, numbers, NULL,
  TRUE and FALSE;
- comparisons, ``AND``/``OR``/``NOT``, ``IS [NOT] NULL``/``TRUE``/``FALSE``,
  ``IS [NOT] DISTINCT FROM`` (SQLite ``IS [NOT]``), ``[NOT] IN (list)``,
  ``[NOT] BETWEEN``, ``[NOT] LIKE`` (``ESCAPE``), ``ILIKE``, ``GLOB``,
  ``SIMILAR TO``, ``~``/``~*``, arithmetic, bitwise operators, ``||``,
  ``CASE``, ``CAST``/``::`` to a plain type, ``COLLATE``;
- calls of the functions in :data:`FILTER_FUNCTIONS`, written as
  ``name(arguments)``.

Everything else is refused, naming what: statements, subqueries (so no
other table), ``*``, window functions, qualified or quoted function names,
other functions (``pg_sleep``, ``lo_from_bytea``, ``load_extension``,
``nextval``, ``set_config``, ``dblink``, aggregates), other string forms
(``E'...'``, ``$$...$$``, ``x'..'``), other placeholders (``?``, ``$1``),
and text over :data:`MAX_FILTER_CHARS` characters or nested deeper than
:data:`MAX_FILTER_DEPTH` parentheses. The statement then runs through
:func:`.runner.open_read_only`: read-only, with a timeout, the function
check and role of PostgreSQL, and bounded results.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar

from ...errors import QueryRefusedError

__all__ = [
    "FILTER_FUNCTIONS",
    "FILTER_TYPES",
    "MAX_FILTER_CHARS",
    "MAX_FILTER_DEPTH",
    "SqlFilter",
    "compile_filter",
]

FILTER_FUNCTIONS = frozenset(
    {
        # text (SQLite, PostgreSQL or both); none builds a value much longer than its inputs
        "lower",
        "upper",
        "length",
        "char_length",
        "character_length",
        "octet_length",
        "substr",
        "substring",
        "trim",
        "ltrim",
        "rtrim",
        "btrim",
        "replace",
        "instr",
        "strpos",
        "starts_with",
        "left",
        "right",
        "reverse",
        "split_part",
        "concat",
        "concat_ws",
        "unicode",
        "ascii",
        "char",
        "chr",
        "hex",
        "md5",
        # numbers
        "abs",
        "round",
        "trunc",
        "floor",
        "ceil",
        "ceiling",
        "sign",
        "sqrt",
        "power",
        "pow",
        "exp",
        "ln",
        "log",
        "log10",
        "log2",
        "mod",
        "div",
        "pi",
        "greatest",
        "least",
        "min",  # SQLite's two-argument min/max
        "max",
        "random",
        # NULLs and types
        "coalesce",
        "nullif",
        "ifnull",
        "iif",
        "typeof",
    }
)
"""The functions a filter may call (by name, in any case). Whether one exists is the
database's business: ``strpos`` is PostgreSQL's, ``instr`` SQLite's."""

# CAST targets, by sqlglot's reading of the name: the name each database is sent. Spelled so
# that SQLite's type affinity and PostgreSQL's type are those of the name the user wrote.
FILTER_TYPES: Mapping[str, Mapping[str, str]] = {
    "INT": {"sqlite": "INTEGER", "postgresql": "INTEGER"},
    "TINYINT": {"sqlite": "INTEGER", "postgresql": "SMALLINT"},  # SQLite reads int8 so
    "SMALLINT": {"sqlite": "SMALLINT", "postgresql": "SMALLINT"},
    "BIGINT": {"sqlite": "BIGINT", "postgresql": "BIGINT"},
    "FLOAT": {"sqlite": "REAL", "postgresql": "REAL"},  # PostgreSQL's real (float4)
    "DOUBLE": {"sqlite": "REAL", "postgresql": "DOUBLE PRECISION"},
    "DECIMAL": {"sqlite": "NUMERIC", "postgresql": "NUMERIC"},
    "TEXT": {"sqlite": "TEXT", "postgresql": "TEXT"},
    "VARCHAR": {"sqlite": "VARCHAR", "postgresql": "VARCHAR"},
    "CHAR": {"sqlite": "CHAR", "postgresql": "CHAR"},
    "BOOLEAN": {"sqlite": "BOOLEAN", "postgresql": "BOOLEAN"},
    "VARBINARY": {"sqlite": "BLOB", "postgresql": "BYTEA"},
}
"""The types a filter may CAST to, without a size (``CAST(x AS NUMERIC)``, not ``NUMERIC(5, 2)``)."""

MAX_FILTER_CHARS = 65_536
"""The longest filter, in characters (sqlglot parses about 100 KB a second): a longer list of
keys goes through ``keys=``."""
MAX_FILTER_DEPTH = 64
"""The deepest nesting of parentheses in a filter."""

_DIALECTS = ("sqlite", "postgresql")
_NAMES = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class SqlFilter:
    """A checked filter: its SQL as it runs and the parameters it binds.

    Attributes
    ----------
    sql:
        The expression as generated from the checked tree (placeholders as
        ``:name``); for messages and logs.
    params:
        The values of the placeholders it names (only those).
    dialect:
        ``"sqlite"`` or ``"postgresql"``.
    """

    sql: str
    params: dict[str, Any]
    dialect: str
    _marked: str = field(repr=False)

    def statement(self, template: str) -> str:
        """``template`` with ``{where}`` replaced by the filter, in the driver's parameter style.

        SQLite (``sqlite3``): ``:name``. PostgreSQL (psycopg): ``%(name)s``,
        with every other ``%`` of the statement doubled, as psycopg reads it
        when parameters are passed. ``template`` is the caller's own SQL
        (no ``{}`` but the one ``{where}``).
        """
        text = template.replace("{where}", self._marked)
        postgres = self.dialect == "postgresql"
        if postgres:
            text = text.replace("%", "%%")
        return _MARK.sub(lambda m: f"%({m.group(1)})s" if postgres else f":{m.group(1)}", text)


# A placeholder as generated, before the driver's style is chosen: NUL cannot be in a filter.
_MARK = re.compile("\x00([A-Za-z_][A-Za-z0-9_]*)\x00")


def _refused(where: str, why: str) -> QueryRefusedError:
    shown = where if len(where) <= 200 else where[:200] + "..."
    return QueryRefusedError(f"refused: where={shown!r}: {why}")


@cache
def _dialect(name: str) -> Any:
    """sqlglot's dialect for ``name`` with every function call read as ``name(args)``.

    sqlglot maps known names to typed nodes (``strpos`` to ``StrPosition``,
    ``iif`` to ``If``) and writes them back in its own spelling, which may
    mean something else (SQLite's ``greatest`` becomes ``MAX(COALESCE(...))``);
    read as anonymous calls they are written back as they were written.
    """
    from sqlglot.dialects.postgres import Postgres
    from sqlglot.dialects.sqlite import SQLite

    base: Any = Postgres if name == "postgresql" else SQLite

    class Parser(base.Parser):  # type: ignore[misc]
        FUNCTIONS: ClassVar[dict[str, Any]] = {}
        FUNCTION_PARSERS: ClassVar[dict[str, Any]] = {"CAST": base.Parser.FUNCTION_PARSERS["CAST"]}
        NO_PAREN_FUNCTIONS: ClassVar[dict[Any, Any]] = {}

    return type(f"ShardcatFilter{base.__name__}", (base,), {"Parser": Parser})


def compile_filter(
    where: str,
    *,
    columns: Collection[str],
    dialect: str,
    params: Mapping[str, Any] | None = None,
) -> SqlFilter:
    """Check ``where`` as one boolean expression over ``columns`` and write it back as SQL.

    Parameters
    ----------
    where:
        The filter, e.g. ``"label = :l AND key LIKE 'cam3/%'"``.
    columns:
        The column names it may use (lower-case identifiers).
    dialect:
        ``"sqlite"`` or ``"postgresql"``.
    params:
        Values of its ``:name`` placeholders; every name it uses must be there.

    Raises
    ------
    QueryRefusedError
        Saying what was refused and why: not one expression, a name or
        construct outside the allow-list (module docstring), a placeholder
        without a value, or too long or deep.
    """
    import sqlglot
    from sqlglot import expressions as exp
    from sqlglot.errors import ParseError, TokenError

    if dialect not in _DIALECTS:
        raise QueryRefusedError(f"where= filters run on SQLite and PostgreSQL, not {dialect}")
    if not where.strip():
        raise _refused(where, "the filter is empty: pass None to select every record")
    if len(where) > MAX_FILTER_CHARS:
        raise _refused(
            where,
            f"the filter has {len(where):,} characters, more than {MAX_FILTER_CHARS:,}; "
            "choose long lists of keys with keys= instead",
        )
    if "\x00" in where:
        raise _refused(where, "the filter holds a NUL character")
    read = _dialect(dialect)
    try:
        tokens = sqlglot.tokenize(where, read=read)
    except TokenError as e:
        raise _refused(where, f"it does not read as SQL ({_first_line(e)})") from None
    depth = deepest = 0
    for token in tokens:
        kind = token.token_type.name
        if kind == "SEMICOLON":
            raise _refused(
                where,
                "a filter is one SQL expression; ';' would end it as one statement and start "
                "another",
            )
        depth += {"L_PAREN": 1, "R_PAREN": -1}.get(kind, 0)
        deepest = max(deepest, depth)
    if deepest > MAX_FILTER_DEPTH:
        raise _refused(where, f"parentheses nest {deepest} deep, more than {MAX_FILTER_DEPTH}")
    try:
        # As an expression, inside parentheses of our own: sqlglot reads a leading REPLACE(
        # as a statement otherwise. On lines of their own: a trailing -- comment ends there.
        wrapped = sqlglot.parse_one(f"(\n{where}\n)", read=read, into=exp.Condition)
    except ParseError as e:
        raise _refused(where, f"it is not one SQL expression ({_parse_error(where, e)})") from None
    except TokenError as e:
        raise _refused(where, f"it does not read as SQL ({_first_line(e)})") from None
    except RecursionError:
        raise _refused(where, "it nests too deeply") from None
    if isinstance(wrapped, (exp.Subquery, exp.Query)):
        raise _refused(
            where,
            "a filter is one expression, not a statement; it reads the columns of sample only",
        )
    if not isinstance(wrapped, exp.Paren):
        # "1) OR (2" inside our parentheses reads as (1) OR (2): not one expression.
        raise _refused(where, "it is not one SQL expression (its parentheses do not pair up)")
    tree = wrapped.this.pop()
    checker = _Checker(where, {c.lower() for c in columns}, dict(params or {}), dialect)
    try:
        marked = checker.check(tree).sql(dialect=read, comments=False)
    except RecursionError:
        raise _refused(where, "it nests too deeply") from None
    shown = _MARK.sub(lambda m: f":{m.group(1)}", marked)
    return SqlFilter(shown, checker.used, dialect, marked)


def _parse_error(where: str, e: Exception) -> str:
    """sqlglot's first complaint, with the place it was made."""
    errors = getattr(e, "errors", None) or []
    if not errors:
        return _first_line(e)
    first = errors[0]
    # Line 1 is the opening parenthesis compile_filter adds.
    lines = where.splitlines() or [""]
    line = min(max(int(first.get("line") or 2) - 1, 1), len(lines))
    col = int(first.get("col") or 0)
    text = lines[line - 1]
    near = text[max(col - 20, 0) : col]
    return f"{first.get('description')}, line {line} column {col}, after {near!r}"


def _first_line(e: Exception) -> str:
    # sqlglot's messages underline the text with terminal escapes on their later lines
    line = str(e).splitlines()[0] if str(e) else type(e).__name__
    return re.sub(r"\x1b\[[0-9;]*m", "", line)[:200]


class _Checker:
    """Walks a parsed filter, refusing any node outside the allow-list, and returns its
    checked copy: columns as quoted names, types as sent, placeholders marked."""

    def __init__(self, where: str, columns: set[str], params: dict[str, Any], dialect: str) -> None:
        from sqlglot import expressions

        self.exp: Any = expressions
        self.where = where
        self.columns = columns
        self.params = params
        self.used: dict[str, Any] = {}
        self.dialect = dialect

    def refuse(self, why: str) -> QueryRefusedError:
        return _refused(self.where, why)

    def check(self, tree: Any) -> Any:
        exp = self.exp
        allowed = _allowed_nodes()
        for node in tree.walk():
            kind = type(node)
            parent = node.parent
            if kind is exp.Column:
                self._column(node)
            elif kind is exp.Anonymous:
                self._function(node)
            elif kind is exp.Cast:
                self._cast(node)
            elif kind is exp.Placeholder:
                self._placeholder(node)
            elif kind is exp.Is:
                if not isinstance(node.expression, (exp.Null, exp.Boolean)):
                    raise self.refuse("IS compares with NULL, TRUE or FALSE only")
            elif kind is exp.Collate:
                if not isinstance(node.expression, (exp.Var, exp.Identifier)):
                    raise self.refuse("COLLATE takes a collation's name")
            elif kind is exp.In:
                if any(node.args.get(a) for a in ("query", "unnest", "field")):
                    raise self.refuse("IN takes a list of values, not a query")
            elif kind in (exp.Identifier, exp.Var, exp.DataType):
                # Only as the name in a column, a collation or a CAST's type (checked there).
                if not isinstance(parent, (exp.Column, exp.Collate, exp.Cast)):
                    raise self.refuse(f"{node.sql()!r} is not allowed here")
            elif kind is not exp.Literal and kind not in allowed:
                raise self.refuse(_describe(node))
        return tree.transform(self._rewrite)

    def _column(self, node: Any) -> None:
        qualifiers = [node.args.get(a) for a in ("catalog", "db")]
        table = node.args.get("table")
        if any(qualifiers) or (table is not None and table.name.lower() != "sample"):
            raise self.refuse(
                f"{node.sql()!r} names another table; a filter reads the columns of sample only"
            )
        if not isinstance(node.this, self.exp.Identifier) or _name(node) not in self.columns:
            raise self.refuse(
                f"unknown column {node.name!r}; the columns are {', '.join(sorted(self.columns))}"
            )

    def _function(self, node: Any) -> None:
        name = node.this
        if not isinstance(name, str) or not _NAMES.fullmatch(name):
            raise self.refuse("a function is called by its plain name: name(arguments)")
        if name.lower() not in FILTER_FUNCTIONS:
            raise self.refuse(
                f"function {name}() is not one a filter may call (FILTER_FUNCTIONS lists "
                "them: comparison, text, number and NULL functions without side effects)"
            )

    def _cast(self, node: Any) -> None:
        to = node.args.get("to")
        if (
            not isinstance(to, self.exp.DataType)
            or to.expressions
            or to.args.get("nested")
            or getattr(to.this, "name", None) not in FILTER_TYPES
        ):
            raise self.refuse(
                f"CAST to {to.sql() if to is not None else '?'} is not allowed; cast to INTEGER, "
                "BIGINT, SMALLINT, REAL, DOUBLE PRECISION, NUMERIC, TEXT, VARCHAR, CHAR, "
                "BOOLEAN or BLOB/BYTEA, without a size"
            )
        if any(node.args.get(a) for a in ("format", "safe", "action", "default")):
            raise self.refuse("CAST takes a value and a type only")

    def _placeholder(self, node: Any) -> None:
        name = node.name
        if not name or not _NAMES.fullmatch(name):
            raise self.refuse("placeholders are named, :name, with values in params=")
        if name not in self.params:
            raise self.refuse(f"placeholder :{name} has no value in params=")
        self.used[name] = self.params[name]

    def _rewrite(self, node: Any) -> Any:
        exp = self.exp
        if isinstance(node, exp.Column):
            return exp.column(_name(node), quoted=True)
        if isinstance(node, exp.Cast):
            # In place: the cast value's own nodes are rewritten after this one.
            node.set("to", exp.Var(this=FILTER_TYPES[node.args["to"].this.name][self.dialect]))
        if isinstance(node, exp.Placeholder):
            return exp.Var(this=f"\x00{node.name}\x00")
        return node


def _name(column: Any) -> str:
    """A column's name as the database reads it: unquoted names fold to lower case."""
    ident = column.this
    return str(ident.name if ident.args.get("quoted") else ident.name.lower())


@cache
def _allowed_nodes() -> frozenset[type]:
    """The node types a filter may hold besides those :class:`_Checker` looks into."""
    from sqlglot import expressions as exp

    return frozenset(
        {
            exp.Paren,
            exp.Tuple,
            exp.Null,
            exp.Boolean,
            exp.And,
            exp.Or,
            exp.Not,
            exp.EQ,
            exp.NEQ,
            exp.GT,
            exp.GTE,
            exp.LT,
            exp.LTE,
            exp.NullSafeEQ,
            exp.NullSafeNEQ,
            exp.Between,
            exp.Like,
            exp.ILike,
            exp.Glob,
            exp.SimilarTo,
            exp.RegexpLike,
            exp.RegexpILike,
            exp.Escape,
            exp.Add,
            exp.Sub,
            exp.Mul,
            exp.Div,
            exp.Mod,
            exp.Neg,
            exp.BitwiseAnd,
            exp.BitwiseOr,
            exp.BitwiseNot,
            exp.BitwiseLeftShift,
            exp.BitwiseRightShift,
            exp.DPipe,
            exp.Case,
            exp.If,  # CASE's WHEN ... THEN
        }
    )


def _describe(node: Any) -> str:
    """Why a node is refused, in the user's terms."""
    from sqlglot import expressions as exp

    if isinstance(node, (exp.Select, exp.Subquery, exp.Exists, exp.SetOperation, exp.Table)):
        return "subqueries are not allowed: a filter reads the columns of sample only"
    if isinstance(node, exp.Alias):
        return "it is not one SQL expression (an expression followed by a name or string)"
    if isinstance(node, exp.Window):
        return "window functions are not allowed in a filter"
    if isinstance(node, exp.Star):
        return "* is not allowed in a filter"
    if isinstance(node, exp.Dot):
        return f"{node.sql()!r}: functions are called by their plain name"
    if isinstance(node, (exp.Parameter, exp.SessionParameter)):
        return "placeholders are named, :name, with values in params="
    if isinstance(node, (exp.RawString, exp.ByteString, exp.HexString, exp.National, exp.Concat)):
        return "write strings as '...' (a quote doubled inside: 'it''s'), or pass them in params="
    if isinstance(node, exp.Func):
        return f"{node.sql()[:60]!r} is not a function a filter may call"
    return f"{node.sql()[:60]!r} ({type(node).__name__}) is not allowed in a filter"
