"""Read-only SQL against the catalog, bounded in time and memory, and a read-only role.

What SQL a user may run is decided here, once, for ``shardcat sql`` and
``where=`` filters alike. ``shardcat sql`` runs text a person typed against
a database others share; :func:`run_read_only` passes it through six layers
(docs/CATALOG.md §15). A ``where=`` filter first passes layer 0, one
boolean expression over named columns, parsed and re-written by sqlglot
(:func:`compile_filter`, ``expression.py``), and the statement made from
it then goes through the same six:


1. one SELECT/WITH/EXPLAIN/VALUES statement (:func:`check_read_only`,
   ``statement.py``);
2. a read-only transaction (SQLite: ``PRAGMA query_only``), the statement
   sent through PostgreSQL's extended protocol, which carries one statement;
3. PostgreSQL: no function the server marks VOLATILE (side effects) or that
   a non-superuser owns, named anywhere in the text or the views it reads
   (``functions.py``);
4. PostgreSQL: ``SET LOCAL ROLE`` to a role that may only read
   (:func:`create_readonly_role`, ``roles.py``);
5. a timeout: ``statement_timeout`` re-armed before every fetch, and dead or
   stalled clients noticed by the server; a progress handler on SQLite;
6. a server-side cursor, ``limit`` rows and ``max_bytes`` of values, and no
   single value over ``max_bytes`` (refused before it reaches the client).

Layers 2, 5 and 6 are :func:`run_read_only` (``runner.py``).
"""

from .expression import (
    FILTER_FUNCTIONS,
    FILTER_TYPES,
    MAX_FILTER_CHARS,
    MAX_FILTER_DEPTH,
    SqlFilter,
    compile_filter,
)
from .functions import SAFE_VOLATILE_FUNCTIONS
from .roles import SQL_ROLE_ENV, ReadOnlyRole, create_readonly_role, require_postgres
from .runner import (
    DEFAULT_MAX_BYTES,
    DEFAULT_TIMEOUT,
    QueryResult,
    QueryStream,
    open_read_only,
    run_read_only,
)
from .statement import READ_ONLY_VERBS, check_read_only

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_TIMEOUT",
    "FILTER_FUNCTIONS",
    "FILTER_TYPES",
    "MAX_FILTER_CHARS",
    "MAX_FILTER_DEPTH",
    "READ_ONLY_VERBS",
    "SAFE_VOLATILE_FUNCTIONS",
    "SQL_ROLE_ENV",
    "QueryResult",
    "QueryStream",
    "ReadOnlyRole",
    "SqlFilter",
    "check_read_only",
    "compile_filter",
    "create_readonly_role",
    "open_read_only",
    "require_postgres",
    "run_read_only",
]
