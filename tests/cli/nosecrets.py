"""No secret printed: the cases and how they run, for test_no_secrets*.py.

No secret of a catalog URL, a storage URL or a storage option is ever printed.

Every command runs as a user runs it, in a process of its own, with a
catalog or storage URL holding a unique secret in the shapes that leaked
before: a bad port, a bad IPv6 host, URL-special characters, an ``@`` in the
password, a URL that does not parse, a server that is not there,
``?password=``, signed query strings; given by ``--catalog``,
``$SHARDCAT_CATALOG`` or a ``--config`` file, with and without ``-v``/``-vv``
and ``--json``. The secret's marker is letters and digits, so finding it
nowhere in stdout or stderr also rules out its percent-encoded and
percent-decoded forms.

Each process pays ~1 s of imports and the matrix has hundreds of cases, so
they run in processes forked (two at a time) from one that imported
shardcat once (tests/_forkrun.py): each child enters at ``sys.exit(main())``
exactly as the ``shardcat`` script does, so an uncaught exception's
traceback is Python's own. A smaller set runs through the installed
``shardcat`` script itself.

The matrix is split by theme so the two test workers share it: catalog
URLs (test_no_secrets_catalog.py), storage URLs and options
(test_no_secrets_storage.py), and the installed script and the forked
runner's fidelity (test_no_secrets.py). The ``world`` they run in is a
fixture of tests/cli/conftest.py.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import _forkrun
from _forkrun import Call
from shardcat import ShardWriter
from shardcat.reading import Catalog

POSTGRES_URL = os.environ.get(
    "SHARDCAT_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
MARK = f"Zq{uuid.uuid4().hex[:12]}Xw"
"""In every secret; letters and digits, so (un)quoting cannot disguise it."""

SRC_KEYS = ("k0", "k1")


def leaks(text: str) -> bool:
    return MARK.lower() in text.lower()


@dataclass
class Case:
    name: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 60
    expect: str = "error"  # exit 1; "ok": exit 0; "any": 0 or 1; "usage": exit 2
    traceback: bool = False  # an exception's traceback is expected (-v)


@dataclass
class Result:
    case: Case
    rc: int
    stdout: str
    stderr: str

    def problems(self) -> list[str]:
        out = []
        for stream, text in (("stdout", self.stdout), ("stderr", self.stderr)):
            lines = [line for line in text.splitlines() if leaks(line)]
            if lines:
                out.append(f"{self.case.name}: the secret is in {stream}: {lines[:3]}")
        wanted = {"error": (1,), "ok": (0,), "any": (0, 1), "usage": (2,)}[self.case.expect]
        if self.rc == -9:
            out.append(f"{self.case.name}: timed out")
        elif self.rc not in wanted:
            out.append(
                f"{self.case.name}: exit {self.rc}, expected {wanted}: {self.stderr[-400:]!r}"
            )
        if self.case.traceback and "Traceback (most recent call last)" not in self.stderr:
            out.append(f"{self.case.name}: -v failed without a traceback: {self.stderr[-400:]!r}")
        return out


# --- running: forked from one process that imported shardcat once (tests/_forkrun.py) ---


def base_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHARDCAT_")}
    env.update(
        {
            "COLUMNS": "250",
            "NO_COLOR": "1",
            "AWS_EC2_METADATA_DISABLED": "true",  # no slow probes for instance credentials
            "OPENBLAS_NUM_THREADS": "1",
            **(extra or {}),
        }
    )
    return env


def run_forked(
    cases: list[Case], cwd: Path, env: dict[str, str], real: bool = False
) -> list[Result]:
    calls = [Call(c.args, {**env, **c.env}, cwd, timeout=c.timeout) for c in cases]
    outcomes = (_forkrun.run_real if real else _forkrun.run_forked)(calls)
    return [
        Result(c, o.returncode, _forkrun.text(o.stdout), _forkrun.text(o.stderr))
        for c, o in zip(cases, outcomes)
    ]


def run_real(cases: list[Case], cwd: Path, env: dict[str, str]) -> list[Result]:
    """Through the installed ``shardcat`` script, two at a time."""
    return run_forked(cases, cwd, env, real=True)


def problems_of(results: list[Result]) -> list[str]:
    """Every leaked secret and unexpected ending among ``results``."""
    return [p for r in results for p in r.problems()]


def check(results: list[Result]) -> None:
    problems = problems_of(results)
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems[:40])


# --- the world the commands run in --------------------------------------------


@dataclass
class World:
    root: Path
    src: Path
    shard: str
    catalog: str  # a good SQLite catalog with dataset d1 (local) and s3d (on S3)
    env: dict[str, str]
    bucket: str
    endpoint: str
    pg: str | None  # a reachable PostgreSQL catalog URL (own schema), or None


def write_dataset(cat: Catalog, name: str, root: str, options: dict[str, Any] | None) -> str:
    cat.create_dataset(name, root)
    url = f"{root}/{name}-000000.shard"
    with ShardWriter(url, storage_options=options) as w:
        for k in SRC_KEYS:
            w.add(k, {"txt": f"text of {k}"})
    cat.register_shard(name, w.close())
    return url


def with_password(url: str, password: str) -> str:
    """``url`` with ``password`` written into it verbatim (not quoted)."""
    scheme, rest = url.split("://", 1)
    user, at, host = rest.partition("@")
    assert at, url
    return f"{scheme}://{user.split(':', 1)[0]}:{password}@{host}"


def catalog_shapes(w: World) -> dict[str, tuple[str, str]]:
    """name → (catalog URL holding the secret, how commands end on it: error, ok or any)."""
    m = MARK
    shapes = {
        "bad-port": (f"postgresql+psycopg://postgres:{m}@127.0.0.1:notaport/db", "error"),
        "bad-ipv6": (f"postgresql+psycopg://postgres:{m}@[::1/x", "error"),
        "special-bad-port": (f"postgresql+psycopg://postgres:{m}-p%40ss:w/rd@127.0.0.1:x/db", "error"),
        "special-refused": (f"postgresql+psycopg://postgres:{m}-p%40ss:w/rd-{m}@127.0.0.1:1/db", "error"),
        "raw-at-refused": (f"postgresql+psycopg://postgres:{m}@{m}x@127.0.0.1:1/db", "error"),
        "one-slash": (f"postgresql+psycopg:/postgres:{m}@127.0.0.1/db", "error"),
        "no-scheme": (f"postgres:{m}@127.0.0.1:5432/db", "error"),
        "refused": (f"postgresql://postgres:{m}@127.0.0.1:1/db", "error"),
        "query-refused": (f"postgresql+psycopg://postgres@127.0.0.1:1/db?password={m}", "error"),
        "query-bad-port": (f"postgresql+psycopg://u@127.0.0.1/db?password={m}&port=x", "error"),
        "psycopg2": (f"postgresql+psycopg2://postgres:{m}@127.0.0.1:1/db", "error"),
        "sqlite-query": (f"sqlite:///{w.root}/q.db?password={m}", "any"),  # ignored, with a warning
    }  # fmt: skip
    if w.pg is not None:
        shapes["pg-password"] = (with_password(w.pg, f"{m}-p%40ss"), "ok")
        shapes["pg-query"] = (f"{w.pg}&password={m}", "ok")
    return shapes


def catalog_commands(w: World, shape: str = "") -> dict[str, list[str]]:
    return {
        "write": [
            "write",
            str(w.src),
            f"memory://nsx/{shape}",
            "-d",
            f"w-{shape}",
            "--workers",
            "1",
        ],
        "ls": ["ls"],
        "ls-d1": ["ls", "d1"],
        "stats": ["stats", "d1"],
        "get": ["get", "d1", "k0"],
        "inspect": ["inspect", w.shard],
        "verify": ["verify", "d1"],
        "reindex": ["reindex", "d1", w.shard],
        "gc": ["gc", "--dry-run"],
        "delete": ["delete", "nope", "--yes"],
        "sql": ["sql", "SELECT 1 AS one"],
        "catalog-upgrade": ["catalog", "upgrade"],
        "catalog-current": ["catalog", "current"],
        "demo": ["demo", "--out", str(w.root / "demo"), "--samples", "8", "--workers", "1"],
    }


VARIANTS: list[tuple[str, tuple[str, ...]]] = [
    ("flag", ()),
    ("env", ("-v",)),
    ("config", ("-vv", "--json")),
    ("flag", ("--json",)),
    ("env", ("-vv",)),
    ("config", ("-v", "--json")),
]
"""(where the URL comes from, global flags); each command takes the next, shape after shape."""

EVERY_COMMAND = ("bad-port", "special-refused", "raw-at-refused", "pg-password", "pg-query")
"""Shapes run through every command (the issue's, bad-port, twice); the others through one
command per way in."""

ONE_PER_PATH = ("write", "ls", "get", "sql", "catalog-upgrade", "catalog-current", "demo")
"""One command per way to the catalog: open_catalog(create=True), open_catalog, the lookup,
``sql``'s own engine, migrations, the read-only revision check, the demo's Catalog."""

CATALOG_SHAPES = (
    "bad-port", "bad-ipv6", "special-bad-port", "special-refused", "raw-at-refused", "one-slash",
    "no-scheme", "refused", "query-refused", "query-bad-port", "psycopg2", "sqlite-query",
    "pg-password", "pg-query",
)  # fmt: skip


def config_file(w: World, name: str, url: str) -> Path:
    path = w.root / "configs" / f"{name}.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        f"catalog = {json.dumps(url)}\n[storage_options]\nsecret = {json.dumps(MARK + 'opt')}\n"
    )
    return path


def catalog_cases(w: World, shape: str) -> list[Case]:
    url, outcome = catalog_shapes(w)[shape]
    fails = outcome == "error"
    every = shape in EVERY_COMMAND
    cases = []
    turn = CATALOG_SHAPES.index(shape)
    for cmd, args in catalog_commands(w, shape).items():
        if not every and cmd not in ONE_PER_PATH:
            continue
        slow = cmd in ("write", "demo") and not fails  # a Dask cluster each
        twice = shape == "bad-port" and not slow
        picks = [turn, turn + len(VARIANTS) // 2] if twice else [turn]
        turn += 1
        for source, flags in (VARIANTS[i % len(VARIANTS)] for i in picks):
            env: dict[str, str] = {}
            if source == "flag":
                glob = [*flags, "--catalog", url]
            elif source == "env":
                glob, env = list(flags), {"SHARDCAT_CATALOG": url}
            else:
                glob = [*flags, "--config", str(config_file(w, shape, url))]
            if cmd == "inspect":
                expect = "ok"  # the shard is local: the catalog plays no part
            elif fails or cmd == "delete":  # (there is no dataset 'nope')
                expect = "error"
            elif cmd == "reindex":  # the shard may have been reindexed already
                expect = "any"
            else:
                expect = outcome
            cases.append(
                Case(
                    f"{shape}/{cmd}/{source}{''.join(flags)}",
                    [*glob, *args],
                    env,
                    timeout=150 if slow else 60,
                    expect=expect,
                    traceback=expect == "error" and any(f.startswith("-v") for f in flags),
                )
            )
    # The catalog subcommands' own --catalog option.
    cases.append(
        Case(
            f"{shape}/catalog-upgrade-c",
            ["-v", "catalog", "upgrade", "-c", url],
            expect=outcome,
            traceback=fails,
        )
    )
    # A URL given where no argument is expected: click's usage error echoes it.
    cases.append(Case(f"{shape}/extra-argument", ["catalog", "current", url], expect="usage"))
    return cases


def catalog_shape_problems(w: World, shape: str) -> list[str]:
    """What goes wrong in the cases of one catalog URL shape: a secret printed, a wrong ending."""
    if shape.startswith("pg-") and w.pg is None:  # outside CI only: there the fixture fails
        pytest.skip("no PostgreSQL server")
    return problems_of(run_forked(catalog_cases(w, shape), w.root, w.env))


def storage_shapes(w: World) -> dict[str, str]:
    """name → a storage *folder* URL holding the secret (shard URLs add ``/a.shard``)."""
    m, b = MARK, w.bucket
    port = w.endpoint.rsplit(":", 1)[1]
    return {
        "s3-userinfo": f"s3://AKIA:{m}@{b}/x",
        "s3-userinfo-special": f"s3://AKIA:{m}-p%40ss:w/rd@{b}/x",
        "https-userinfo": f"https://user:{m}@127.0.0.1:1/x",
        "https-sig": f"https://127.0.0.1:1/x?sig={m}",
        "http-404-amz": f"http://127.0.0.1:{port}/{b}/x?X-Amz-Signature={m}&X-Amz-Credential=AKIA",
        "s3-amz": f"s3://{b}/x?X-Amz-Signature={m}",
        "memory-userinfo": f"memory://user:{m}@/x",
    }


def shard_url(folder: str) -> str:
    path, q, query = folder.partition("?")
    return f"{path}/a.shard{q}{query}"


STORAGE_SHAPES = (
    "s3-userinfo", "s3-userinfo-special", "https-userinfo", "https-sig", "http-404-amz", "s3-amz",
    "memory-userinfo",
)  # fmt: skip
FLAGS: list[list[str]] = [[], ["-v"], ["-vv", "--json"], ["--json"]]


def storage_cases(w: World, shape: str) -> list[Case]:
    """The commands that take a storage URL (the Dask ones aside), the URL holding the secret."""
    c = ["--catalog", w.catalog]
    opts = ["-S", f"secret={MARK}s", "-S", f"token={MARK}t"]
    shard = shard_url(storage_shapes(w)[shape])
    turn = STORAGE_SHAPES.index(shape)
    cases = [Case(f"{shape}/inspect{''.join(f)}", [*f, "inspect", shard]) for f in FLAGS[:3]]
    f = FLAGS[turn % len(FLAGS)]
    cases.append(Case(f"{shape}/inspect-opts{''.join(f)}", [*f, *opts, "inspect", shard]))
    f = FLAGS[(turn + 1) % len(FLAGS)]
    cases.append(Case(f"{shape}/reindex{''.join(f)}", [*f, *c, "reindex", "d1", shard]))
    return cases


def option_cases(w: World) -> list[Case]:
    """Secrets in storage options, for every command that reaches storage through the catalog."""
    c = ["--catalog", w.catalog]
    s3opts = [
        "-S",
        "key=testing",
        "-S",
        f"secret={MARK}",
        "-S",
        f"client_kwargs.aws_session_token={MARK}x",
    ]
    config = w.root / "configs" / "s3.toml"
    config.parent.mkdir(exist_ok=True)
    config.write_text(
        f"catalog = {json.dumps(w.catalog)}\n[storage_options]\n"
        f'key = "testing"\nsecret = "{MARK}"\ntoken = "{MARK}tok"\n'
    )
    shard = f"s3://{w.bucket}/s3d/s3d-000000.shard"
    cases = []
    for i, (name, args, expect) in enumerate(
        [
            ("ls", ["ls", "s3d"], "ok"),
            ("stats", ["stats", "s3d"], "ok"),
            ("get", ["get", "s3d", "k0"], "ok"),
            ("get-missing", ["get", "s3d", "nope"], "error"),
            ("verify", ["verify", "s3d"], "any"),
            ("gc", ["gc", "s3d", "--dry-run"], "any"),
            ("reindex", ["reindex", "s3d", shard], "any"),
            ("inspect", ["inspect", shard], "any"),
            ("delete", ["delete", "nope", "--yes"], "error"),
        ]
    ):
        for j, (source, glob) in enumerate(
            (("S", [*c, *s3opts]), ("config", ["--config", str(config)]))
        ):
            f = FLAGS[(i + 2 * j) % len(FLAGS)]
            cases.append(
                Case(f"options-{source}/{name}{''.join(f)}", [*f, *glob, *args], expect=expect)
            )
    # A malformed -S pair and a malformed config file that hold the secret.
    bad = w.root / "configs" / "bad.toml"
    bad.write_text(f'catalog = "postgresql://u:{MARK}@h/db\n')
    cases += [
        Case("bad-pair", ["-v", "-S", f"{MARK}", "ls"], expect="usage"),
        Case("bad-config", ["-v", "--config", str(bad), "ls"], expect="usage"),
    ]
    return cases


def dask_cases(w: World, shapes: list[tuple[str, list[str]]]) -> list[Case]:
    """write to storage URLs holding the secret: a Dask cluster each, so a few only."""
    c = ["--catalog", w.catalog]
    cases = []
    for shape, f in shapes:
        folder = storage_shapes(w)[shape]
        write = ["write", str(w.src), folder, "-d", f"w-{shape}", "--workers", "1"]
        cases.append(
            Case(f"{shape}/write{''.join(f)}", [*f, *c, *write], timeout=200, expect="any")
        )
    return cases
