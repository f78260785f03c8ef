"""No secret of a storage URL or a storage option is printed; the runners are faithful.

Storage URLs holding a secret (userinfo, signed query strings) through the
commands that take one, the Dask ones included; secrets in storage options
(``-S`` and a ``--config`` file) through every command that reaches storage;
a sample of both matrices through the installed ``shardcat`` script; and the
forked runner (tests/_forkrun.py) held to what the script prints. The catalog
URL shapes are in test_no_secrets_catalog.py and
test_no_secrets_catalog_paths.py; the cases, the runners and the ``world``
they run in: tests/cli/nosecrets.py and tests/cli/conftest.py.
"""

from __future__ import annotations

import pytest

from .nosecrets import (
    MARK,
    ONE_PER_PATH,
    STORAGE_SHAPES,
    Case,
    catalog_commands,
    catalog_shapes,
    check,
    dask_cases,
    option_cases,
    run_forked,
    run_real,
    shard_url,
    storage_cases,
    storage_shapes,
)

pytestmark = pytest.mark.usefixtures("fresh_demo_folder")


@pytest.mark.parametrize("shape", STORAGE_SHAPES)
def test_storage_url_secrets_are_never_printed(world, shape):
    check(run_forked(storage_cases(world, shape), world.root, world.env))


def test_storage_option_secrets_are_never_printed(world):
    check(run_forked(option_cases(world), world.root, world.env))


def test_dask_commands_print_no_storage_secret(world):
    opts = ["-S", f"secret={MARK}s", "-S", f"token={MARK}t"]  # shipped to the workers
    shapes = [
        ("https-userinfo", ["-v", "--json", *opts]),
        ("memory-userinfo", []),
        ("s3-amz", ["-vv"]),
    ]
    check(run_forked(dask_cases(world, shapes), world.root, world.env))


def test_an_s3_url_with_credentials_is_refused_before_any_worker_sees_it(world):
    """s3fs would take s3://KEY:SECRET@bucket for a bucket of that name, and a Dask worker
    process would log the store's error quoting it, where the CLI cannot scrub."""
    cases = dask_cases(world, [("s3-userinfo", ["-vv"])])
    demo = [
        "demo",
        "--out",
        storage_shapes(world)["s3-userinfo"],
        "--samples",
        "8",
        "--workers",
        "1",
    ]
    cases.append(Case("s3-userinfo/demo", [*demo], timeout=200, expect="any"))
    check(run_forked(cases, world.root, world.env))


def test_the_installed_script_prints_no_secret(world):
    """A sample of both matrices through ``.venv/bin/shardcat`` itself."""
    shapes = catalog_shapes(world)
    bad = shapes["bad-port"][0]
    cases = [
        Case(f"real/bad-port/{cmd}", ["-v", "--catalog", bad, *args], traceback=True)
        for cmd, args in catalog_commands(world, "real").items()
        if cmd in ONE_PER_PATH
    ]
    cases += [
        Case(
            "real/bad-ipv6/env",
            ["-vv", "--json", "ls"],
            {"SHARDCAT_CATALOG": shapes["bad-ipv6"][0]},
        ),
        Case("real/special/upgrade", ["catalog", "upgrade", "-c", shapes["special-bad-port"][0]]),
        Case(
            "real/refused/current", ["-v", "-c", shapes["special-refused"][0], "catalog", "current"]
        ),
    ]
    for shape in ("s3-userinfo", "http-404-amz", "memory-userinfo", "https-sig"):
        folder = storage_shapes(world)[shape]
        cases.append(Case(f"real/{shape}/inspect", ["-v", "inspect", shard_url(folder)]))
    check(run_real(cases, world.root, world.env))


def test_fork_runner_sees_what_the_script_prints(world, tmp_path):
    """The forked runner reproduces the script's output: same exit code, same lines."""
    cases = [
        Case("ok", ["--catalog", world.catalog, "ls"], expect="ok"),
        Case("error", ["--catalog", world.catalog, "get", "d1", "nope"]),
        Case("traceback", ["-v", "--catalog", world.catalog, "get", "nope", "k0"]),
    ]
    forked = run_forked(cases, tmp_path, world.env)
    real = run_real(cases, tmp_path, world.env)
    for f, r in zip(forked, real):
        assert (f.rc, f.stdout) == (r.rc, r.stdout)
        assert f.stderr.splitlines()[-1:] == r.stderr.splitlines()[-1:]
    assert "Traceback (most recent call last)" in forked[2].stderr
