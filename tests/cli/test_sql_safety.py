"""``shardcat sql`` against runaway and hostile queries, on real SQLite files and the real PostgreSQL.

Each test reproduces a finding of the review "High: `shardcat sql`": queries
that ran until killed (and kept running on the server after the client was
killed), results buffered whole, and a superuser catalog URL with which the
"read-only" command read the server's files and killed other sessions. The
CLI runs as a user runs it, in a process of its own: forked from one that
imported shardcat once (tests/_forkrun.py), and ``python -m shardcat`` or the
installed script where the process itself is under test (killed, stopped,
its memory measured) and in test_roles_are_postgresql_only; where a layer
can only be seen on its own (the read-only role without the function check),
the library is called directly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

import shardcat
from _forkrun import Call, completed
from shardcat.catalog import create_catalog_engine
from shardcat.catalog.readonly import check_read_only, create_readonly_role, run_read_only
from shardcat.errors import CatalogError, QueryTimeoutError
from shardcat.reading import Catalog

Result = subprocess.CompletedProcess[Any]

RECORDS = 300
RUNAWAY = {
    "recursive CTE": "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
    "SELECT count(*) FROM r",
    "cross join": "SELECT count(*) FROM records a, records b, records c, records d",
}
HOSTILE = [  # (statement, the function the refusal names)
    ("SELECT pg_read_file('/etc/passwd')", "pg_read_file"),
    ("SELECT ('/etc/passwd'::text).pg_read_file", "pg_read_file"),  # field notation: no '('
    ("SELECT \"pg_read_file\"('/etc/passwd')", "pg_read_file"),
    ("SELECT pg_catalog . PG_READ_FILE /* c */ ('/etc/passwd')", "pg_read_file"),
    (
        "SELECT query_to_xml('SELECT pg_read_file(''/etc/passwd'')', true, false, '')",
        "query_to_xml",
    ),
    ("EXPLAIN ANALYZE SELECT pg_read_file('/etc/passwd')", "pg_read_file"),
    ("SELECT pg_ls_dir('.')", "pg_ls_dir"),
    ("SELECT lo_import('/etc/hostname')", "lo_import"),
    ("SELECT pg_reload_conf()", "pg_reload_conf"),
    ("SELECT pg_stat_reset()", "pg_stat_reset"),
    ("SELECT pg_notify('shardcat', 'x')", "pg_notify"),
    ("SELECT pg_advisory_lock(42)", "pg_advisory_lock"),
    ("SELECT pg_sleep(600)", "pg_sleep"),
    ("SELECT set_config('role', 'postgres', false)", "set_config"),
    ('SELECT U&"\\0070g_sleep"(600)', 'U&"..."'),
]


# --- helpers ------------------------------------------------------------------


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    drop = ("SHARDCAT_CATALOG", "SHARDCAT_CONFIG", "SHARDCAT_SQL_ROLE", "SHARDCAT_ROLE_PASSWORD")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update({"COLUMNS": "250", "NO_COLOR": "1", **(extra or {})})
    return env


def _command(catalog: str, args: tuple[str, ...]) -> list[str]:
    return [sys.executable, "-m", "shardcat", "--catalog", catalog, *args]


def runs(
    *calls: tuple[str, ...], catalog: str, env: dict[str, str] | None = None, real: bool = False
) -> list[Result]:
    """Independent invocations, two at a time, forked from a process that imported shardcat
    once (tests/_forkrun.py); ``real``: through the installed script."""
    cwd = os.getcwd()
    full = _env(env)
    return completed(
        [Call(["--catalog", catalog, *args], full, cwd, timeout=180) for args in calls], real=real
    )


def run(*args: str, catalog: str, env: dict[str, str] | None = None, real: bool = False) -> Result:
    return runs(args, catalog=catalog, env=env, real=real)[0]


def ok(p: Result) -> Result:
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def refused(p: Result, *needles: str) -> None:
    shown = f"exit {p.returncode}\nstdout:\n{p.stdout[:2000]}\nstderr:\n{p.stderr}"
    assert p.returncode == 1, shown
    assert "Traceback" not in p.stderr, shown
    assert len(p.stderr.strip().splitlines()) == 1, shown  # one line, as every CLI error
    for needle in needles:
        assert needle in p.stderr, shown


# The child's own high-water mark (VmHWM of its address space after exec), written as it
# exits. Not wait4's ru_maxrss: Linux carries the forking parent's RSS into that figure,
# so a test process grown large by an earlier test would make every child look huge.
_MEASURED = """
import atexit, os, runpy, sys
def _hwm():
    with open("/proc/self/status") as f, open(os.environ["SHARDCAT_TEST_HWM"], "w") as o:
        o.write(next(line for line in f if line.startswith("VmHWM:")).split()[1])
atexit.register(_hwm)
sys.argv[0] = "shardcat"
runpy.run_module("shardcat", run_name="__main__", alter_sys=True)
"""


def peak_rss(*args: str, catalog: str) -> tuple[int, str, str, float]:
    """Run the CLI; its exit code, stdout, stderr and peak RSS in MiB."""
    with tempfile.TemporaryDirectory() as tmp:
        hwm = Path(tmp) / "hwm"
        command = [sys.executable, "-c", _MEASURED, "--catalog", catalog, *args]
        p = subprocess.run(
            command,
            capture_output=True,
            env=_env({"SHARDCAT_TEST_HWM": str(hwm)}),
            timeout=180,
        )
        return (
            p.returncode,
            p.stdout.decode(errors="replace"),
            p.stderr.decode(errors="replace"),
            int(hwm.read_text()) / 1024,  # KiB
        )


def fill(url: str, root: Path) -> str:
    """A catalog with one dataset of RECORDS records."""
    root.mkdir(parents=True, exist_ok=True)
    with Catalog(url) as cat:
        cat.create_dataset("big", str(root))
        with shardcat.ShardWriter(str(root / "big-000000.shard"), shard_number=0) as w:
            for i in range(RECORDS):
                w.add(f"k{i:04d}", {"txt": b"x"})
        cat.register_shard("big", w.close())
    return url


def schema_of(url: str) -> str:
    return make_url(url).query["options"].split("=", 1)[1]  # type: ignore[union-attr]


@pytest.fixture
def filled(catalog_url: str, tmp_path: Path) -> str:
    return fill(catalog_url, tmp_path / "shards")


@pytest.fixture
def pg(postgres_url: str, tmp_path: Path) -> str:
    return fill(postgres_url, tmp_path / "shards")


@pytest.fixture
def admin(postgres_server: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(postgres_server, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


@pytest.fixture
def roles(admin: sa.Engine) -> Iterator[list[str]]:
    """Role names a test creates (roles belong to the cluster): dropped afterwards."""
    names: list[str] = []
    yield names
    with admin.connect() as conn:
        for name in names:
            if conn.execute(
                sa.text("SELECT 1 FROM pg_roles WHERE rolname = :n"), {"n": name}
            ).first():
                conn.exec_driver_sql(f'DROP OWNED BY "{name}"')
                conn.exec_driver_sql(f'DROP ROLE "{name}"')


def role_name() -> str:
    return f"shardcat_ro_{uuid.uuid4().hex[:10]}"


def backends(admin: sa.Engine, app: str) -> list[tuple[int, str, str]]:
    """(pid, state, query) of the sessions whose application_name is ``app``."""
    with admin.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT pid, state, query FROM pg_stat_activity WHERE application_name = :a"),
            {"a": app},
        )
        return [(r.pid, r.state, r.query) for r in rows]


def terminate(admin: sa.Engine, app: str) -> None:
    with admin.connect() as conn:
        conn.execute(
            sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = :a"
            ),
            {"a": app},
        )


def wait_for(predicate: Any, *, seconds: float, step: float = 0.25) -> float | None:
    """Seconds until ``predicate()`` held (checked every ``step``), or None after ``seconds``."""
    start = time.monotonic()
    for _ in range(int(seconds / step) + 1):
        if predicate():
            return time.monotonic() - start
        time.sleep(step)
    return None


# --- layer 1: statements (the E'...' escape) -----------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "SELECT E'\\'' ; DELETE FROM records --'",
        "SELECT e'\\\\'; DELETE FROM records",
        "SELECT E'it''s \\'' ; DROP TABLE records; --'",
    ],
)
def test_an_escaped_quote_cannot_hide_a_second_statement(query):
    with pytest.raises(CatalogError, match="one statement"):
        check_read_only(query, "postgresql")


def test_escape_strings_and_names_ending_in_e_read_as_postgresql_reads_them():
    assert check_read_only("SELECT E'a\\'b;c'", "postgresql") == "SELECT E'a\\'b;c'"
    # `name'...'` is a name and a plain string: the backslash escapes nothing
    assert check_read_only("SELECT 'a\\' AS some", "postgresql") == "SELECT 'a\\' AS some"
    with pytest.raises(CatalogError, match="unterminated quote"):
        check_read_only("SELECT E'a\\'", "postgresql")


def test_an_escaped_quote_cannot_smuggle_a_write_past_the_check(pg, admin):
    p = run("sql", "SELECT E'\\'' ; COMMIT; CREATE TABLE pwned (x int); SELECT 1 --'", catalog=pg)
    refused(p, "one statement")
    with admin.connect() as conn:
        found = conn.execute(
            sa.text("SELECT to_regclass(:t)"), {"t": f"{schema_of(pg)}.pwned"}
        ).scalar()
    assert found is None


def test_the_extended_protocol_carries_one_statement_only(pg, admin):
    """Layer 2 on its own: even text that passed layer 1 cannot run a second statement."""
    from shardcat.catalog.readonly.runner import _run_postgres

    engine = create_catalog_engine(pg)
    raw = engine.raw_connection()
    try:
        for explain in (True, False):
            with (
                pytest.raises(Exception, match=r"multiple commands|syntax error"),
                _run_postgres(
                    raw.driver_connection,
                    "EXPLAIN SELECT 1; COMMIT; CREATE TABLE pwned (x int)"
                    if explain
                    else "SELECT 1; COMMIT; CREATE TABLE pwned (x int)",
                    explain=explain,
                    limit=10,
                    timeout=30,
                    max_bytes=0,
                    role=None,
                    check_functions=False,
                ) as rows,
            ):
                list(rows)
    finally:
        raw.close()
        engine.dispose()
    with admin.connect() as conn:
        found = conn.execute(
            sa.text("SELECT to_regclass(:t)"), {"t": f"{schema_of(pg)}.pwned"}
        ).scalar()
    assert found is None


# --- layer 5: the timeout ------------------------------------------------------


def test_runaway_queries_stop_at_the_timeout(filled):
    queries = list(RUNAWAY.values())
    if filled.startswith("postgresql"):
        queries.append(
            "SELECT sum(length(repeat(g::text, 100000))) FROM generate_series(1, 100000000) g"
        )
    for p in runs(*(("sql", "--timeout", "1", q) for q in queries), catalog=filled):
        refused(p, "ran over the 1 s timeout", "--timeout")


def test_a_timeout_leaves_the_pooled_connection_clean(filled):
    engine = create_catalog_engine(filled)
    try:
        with pytest.raises(QueryTimeoutError, match="1 s timeout"):
            run_read_only(engine, RUNAWAY["recursive CTE"], timeout=1)
        if engine.dialect.name == "postgresql":  # the timeout layer on its own
            with pytest.raises(QueryTimeoutError):
                run_read_only(engine, "SELECT pg_sleep(600)", timeout=1, check_functions=False)
        result = run_read_only(engine, "SELECT count(*) AS n FROM records")
        assert result.rows == ((RECORDS,),) and result.cut is None
        with engine.begin() as conn:  # writable again: query_only and the handler are gone
            conn.exec_driver_sql("CREATE TABLE after_timeout (x INTEGER)")
            conn.exec_driver_sql("INSERT INTO after_timeout VALUES (1)")
    finally:
        engine.dispose()


def test_a_killed_client_leaves_no_query_running_on_the_server(pg, admin):
    """Before: the backend kept running the query for minutes after SIGKILL of the client."""
    app = f"shardcat-test-{uuid.uuid4().hex[:8]}"
    p = subprocess.Popen(
        _command(pg, ("sql", RUNAWAY["recursive CTE"])),  # the default timeout (30 s)
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_env({"PGAPPNAME": app}),
    )
    try:
        running = lambda: any(s == "active" for _, s, _ in backends(admin, app))  # noqa: E731
        assert wait_for(running, seconds=120) is not None, "the query never started"
        p.kill()
        p.wait(timeout=30)
        gone = wait_for(lambda: not running(), seconds=20)
        # client_connection_check_interval: the server notices the dead client within ~1 s,
        # long before the 30 s timeout
        assert gone is not None and gone < 10, backends(admin, app)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)
        terminate(admin, app)


def test_the_server_stops_a_stalled_clients_query_at_the_timeout(pg, admin):
    """A client that cannot act (stopped) still has its query ended by the server."""
    app = f"shardcat-test-{uuid.uuid4().hex[:8]}"
    p = subprocess.Popen(
        _command(pg, ("sql", "--timeout", "2", RUNAWAY["recursive CTE"])),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_env({"PGAPPNAME": app}),
    )
    try:
        fetching = lambda: any(  # noqa: E731
            s == "active" and q.startswith("FETCH") for _, s, q in backends(admin, app)
        )
        assert wait_for(fetching, seconds=120, step=0.1) is not None, "the query never started"
        os.kill(p.pid, signal.SIGSTOP)
        # statement_timeout cancels the query at 2 s; idle_in_transaction_session_timeout then
        # ends the session of the client that no longer answers
        assert wait_for(lambda: not fetching(), seconds=15) is not None, backends(admin, app)
        assert wait_for(lambda: not backends(admin, app), seconds=20) is not None
    finally:
        p.kill()
        p.wait(timeout=30)
        terminate(admin, app)


# --- layer 6: streaming and the byte budget -------------------------------------

THREE_MILLION = {
    "postgresql": "SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 3000000) g",
    "sqlite": "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3000000) "
    "SELECT n, printf('%.*c', 200, 'x') AS pad FROM r",
}
ONE_HUGE_VALUE = {
    "postgresql": "SELECT repeat('x', 300000000) AS huge",
    "sqlite": "SELECT zeroblob(300000000) AS huge",
}
MIB_BOUND = 200  # `shardcat sql "SELECT 1"` peaks at ~95 MiB; before the fix 850-950 MiB


def _dialect(url: str) -> str:
    return "postgresql" if url.startswith("postgresql") else "sqlite"


def test_three_million_rows_with_limit_3_are_streamed(filled):
    """Before: PostgreSQL's rows were all fetched into the client (855 MiB for --limit 3)."""
    code, out, err, mib = peak_rss(
        "sql", "--limit", "3", THREE_MILLION[_dialect(filled)], "--output", "table", catalog=filled
    )
    assert code == 0, err
    assert "3 rows" in out and "first 3 rows" in err
    assert mib < MIB_BOUND, f"peak RSS {mib:.0f} MiB"


def test_one_huge_value_is_refused_before_it_fills_the_memory(filled):
    """Before: the value was built and fetched whole (PostgreSQL 952 MiB, SQLite 846 MiB)."""
    code, _, err, mib = peak_rss("sql", ONE_HUGE_VALUE[_dialect(filled)], catalog=filled)
    assert code == 1 and "larger than the --max-bytes budget of 64.0 MiB" in err, err
    assert mib < MIB_BOUND, f"peak RSS {mib:.0f} MiB"


def test_max_bytes_cuts_the_output_and_says_so(filled):
    query = "SELECT key, 'more ' || key AS k2 FROM records ORDER BY key"
    cut, whole = runs(
        ("--json", "sql", "--max-bytes", "2KB", query),
        ("--json", "sql", "--max-bytes", "0", query),
        catalog=filled,
    )
    doc = json.loads(ok(cut).stdout)
    rows = doc["rows"]
    assert 0 < len(rows) < RECORDS and rows[0] == {"key": "k0000", "k2": "more k0000"}
    assert doc["truncated"] is True and doc["cut"] == "max_bytes" and doc["max_bytes"] == 2000
    assert "output cut after" in cut.stderr and "--max-bytes" in cut.stderr
    whole_doc = json.loads(ok(whole).stdout)
    assert len(whole_doc["rows"]) == RECORDS and whole_doc["truncated"] is False


# --- layer 3: functions with side effects (PostgreSQL) --------------------------


def test_functions_with_side_effects_are_refused(pg):
    results = runs(*(("sql", q) for q, _ in HOSTILE), catalog=pg)
    for (query, name), p in zip(HOSTILE, results):
        refused(p, "refused", name)
        assert "root:" not in p.stdout, query


def test_another_session_cannot_be_killed(pg, postgres_server):
    import psycopg

    victim = psycopg.connect(postgres_server.replace("+psycopg", ""), autocommit=True)
    try:
        pid = victim.info.backend_pid
        refused(
            run("sql", f"SELECT pg_terminate_backend({pid})", catalog=pg), "pg_terminate_backend"
        )
        assert victim.execute("SELECT 1").fetchone() == (1,)  # still alive
    finally:
        victim.close()


def test_harmless_functions_still_run(pg):
    query = (
        "SELECT random() < 2 AS r, clock_timestamp() IS NOT NULL AS c, "
        "gen_random_uuid() IS NOT NULL AS u, now() IS NOT NULL AS n, lower('A') AS l, "
        "(SELECT count(*) FROM records TABLESAMPLE SYSTEM (100)) AS sampled"
    )
    doc = json.loads(ok(run("--json", "sql", query, catalog=pg)).stdout)["rows"]
    assert doc == [{"r": True, "c": True, "u": True, "n": True, "l": "a", "sampled": RECORDS}]


def test_views_and_functions_of_untrusted_owners_are_refused(pg, admin, roles):
    schema = schema_of(pg)
    owner = role_name()
    roles.append(owner)
    with admin.connect() as conn:
        conn.exec_driver_sql(
            f"CREATE VIEW \"{schema}\".innocent AS SELECT pg_read_file('/etc/hostname') AS x"
        )
        conn.exec_driver_sql(f'CREATE VIEW "{schema}".wrapper AS SELECT * FROM "{schema}".innocent')
        conn.exec_driver_sql(f'CREATE ROLE "{owner}" NOLOGIN')
        # STABLE says "no side effects", but only its owner said so
        conn.exec_driver_sql(
            f'CREATE FUNCTION "{schema}".sneaky() RETURNS text STABLE LANGUAGE sql '
            "AS $$ SELECT 'x' $$"
        )
        conn.exec_driver_sql(f'ALTER FUNCTION "{schema}".sneaky() OWNER TO "{owner}"')
    view, function = runs(("sql", "SELECT * FROM wrapper"), ("sql", "SELECT sneaky()"), catalog=pg)
    refused(view, "view", "innocent", "pg_read_file")
    refused(function, "sneaky", "not a superuser")


# --- layer 4: the read-only role (PostgreSQL) -----------------------------------

DENIED_TO_THE_ROLE = [
    "SELECT pg_read_file('/etc/passwd')",
    "SELECT pg_ls_dir('.')",
    "SELECT lo_import('/etc/hostname')",
    "SELECT pg_reload_conf()",
    "SELECT pg_stat_reset()",
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()",
]


def test_create_readonly_role_then_query_as_it(pg, admin, roles, tmp_path):
    name = role_name()
    roles.append(name)
    schema = schema_of(pg)
    first = json.loads(
        ok(run("--json", "catalog", "create-readonly-role", name, catalog=pg)).stdout
    )
    again = json.loads(
        ok(run("--json", "catalog", "create-readonly-role", name, catalog=pg)).stdout
    )
    tables = {
        "datasets",
        "jobs",
        "shards",
        "records",
        "layouts",
        "layout_entries",
        "alembic_version",
    }
    assert first["created"] is True and first["login"] is False and first["schema"] == schema
    assert tables <= set(first["tables"])
    assert again["created"] is False and again["tables"] == first["tables"]  # idempotent
    with admin.connect() as conn:
        can = lambda what, obj, priv: conn.execute(  # noqa: E731
            sa.text(f"SELECT has_{what}_privilege(:r, :o, :p)"), {"r": name, "o": obj, "p": priv}
        ).scalar()
        assert can("table", f'"{schema}".records', "SELECT")
        assert not can("table", f'"{schema}".records', "INSERT")
        assert not can("schema", schema, "CREATE")
        attrs = conn.execute(
            sa.text("SELECT rolcanlogin, rolsuper FROM pg_roles WHERE rolname = :r"), {"r": name}
        ).one()
        assert tuple(attrs) == (False, False)
        conn.exec_driver_sql(f'CREATE TABLE "{schema}".added_later (x int)')  # a new migration
        assert can("table", f'"{schema}".added_later', "SELECT")

    config = tmp_path / "shardcat.toml"
    config.write_text(f'sql_role = "{name}"\n')
    query = "SELECT current_user AS u, count(*) AS n FROM records"
    flag, from_config, without = runs(
        ("--json", "sql", "--role", name, query),
        ("--config", str(config), "--json", "sql", query),
        ("--json", "sql", query),  # no role configured: the URL's user
        catalog=pg,
    )
    env = run("--json", "sql", query, catalog=pg, env={"SHARDCAT_SQL_ROLE": name})
    for p in (flag, from_config, env):
        assert json.loads(ok(p).stdout)["rows"] == [{"u": name, "n": RECORDS}]
    assert json.loads(ok(without).stdout)["rows"] == [{"u": "postgres", "n": RECORDS}]

    # The role on its own, without the function check: the server's privileges refuse.
    engine = create_catalog_engine(pg)
    try:
        for query in DENIED_TO_THE_ROLE:
            with pytest.raises(CatalogError, match=r"permission denied|must be a superuser"):
                run_read_only(engine, query, role=name, check_functions=False)
        result = run_read_only(engine, "SELECT count(*) FROM shards", role=name)
        assert result.rows == ((1,),)
    finally:
        engine.dispose()


def test_a_login_role_gets_a_hashed_password_and_can_only_read(pg, admin, roles):
    name = role_name()
    roles.append(name)
    secret = f"pw-{uuid.uuid4().hex}"
    p = ok(
        run(
            "catalog",
            "create-readonly-role",
            name,
            "--login",
            catalog=pg,
            env={"SHARDCAT_ROLE_PASSWORD": secret},
        )
    )
    assert secret not in p.stdout + p.stderr and "LOGIN" in p.stdout
    with admin.connect() as conn:
        login, stored = conn.execute(
            sa.text("SELECT rolcanlogin, rolpassword FROM pg_authid WHERE rolname = :r"),
            {"r": name},
        ).one()
    assert login is True and stored.startswith("SCRAM-SHA-256$") and secret not in stored

    as_role = make_url(pg).set(username=name).render_as_string(hide_password=False)
    doc = json.loads(
        ok(run("--json", "sql", "SELECT count(*) AS n FROM records", catalog=as_role)).stdout
    )
    assert doc["rows"] == [{"n": RECORDS}]
    engine = create_catalog_engine(as_role)
    try:
        for query in [*DENIED_TO_THE_ROLE, "SELECT set_config('role', 'postgres', true)"]:
            # logged in as the role, not even SET ROLE back to a superuser works
            with pytest.raises(CatalogError, match=r"permission denied|must be a superuser"):
                run_read_only(engine, query, check_functions=False)
    finally:
        engine.dispose()


def test_the_readonly_role_reads_the_version_views(pg, roles):
    """The views of what versions see (docs/CATALOG.md §12.1) are granted with the tables."""
    name = role_name()
    roles.append(name)
    engine = create_catalog_engine(pg)
    try:
        made = create_readonly_role(engine, name)
        assert {"live_records", "live_shards", "records_at", "shards_at"} <= set(made.tables)
        for view, expected in (("live_records", RECORDS), ("live_shards", 1)):
            result = run_read_only(engine, f"SELECT count(*) FROM {view}", role=name)
            assert result.rows == ((expected,),)
        result = run_read_only(
            engine, "SELECT version, count(*) FROM records_at GROUP BY version", role=name
        )
        assert result.rows == ((1, RECORDS),)
    finally:
        engine.dispose()


def test_roles_with_powers_the_connected_user_and_missing_roles_are_refused(pg, admin, roles):
    name = role_name()
    roles.append(name)
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE ROLE "{name}" NOLOGIN CREATEDB')
    powerful, me, missing = runs(
        ("catalog", "create-readonly-role", name),
        ("catalog", "create-readonly-role", "postgres"),
        ("sql", "--role", "shardcat_no_such_role", "SELECT 1"),
        catalog=pg,
    )
    refused(powerful, "can do more than read", "CREATEDB")
    refused(me, "the user you are connected as")
    refused(
        missing, "does not exist", "shardcat catalog create-readonly-role shardcat_no_such_role"
    )


def test_roles_are_postgresql_only(sqlite_url, tmp_path):
    fill(sqlite_url, tmp_path / "shards")
    # through the installed script, as a user runs it: what the forked runs stand for
    create, flag, env = (
        run("catalog", "create-readonly-role", "reader", catalog=sqlite_url, real=True),
        run("sql", "--role", "reader", "SELECT 1", catalog=sqlite_url, real=True),
        run(
            "--json",
            "sql",
            "SELECT count(*) AS n FROM records",
            catalog=sqlite_url,
            env={"SHARDCAT_SQL_ROLE": "reader"},
            real=True,
        ),
    )
    refused(create, "PostgreSQL-only")
    refused(flag, "PostgreSQL-only")
    # a team-wide $SHARDCAT_SQL_ROLE does not stop queries of a SQLite file
    assert json.loads(ok(env).stdout)["rows"] == [{"n": RECORDS}]
