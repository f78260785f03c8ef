"""docker-compose.yml agrees with itself, with the real CLIs and with what the tests exercise.

No Docker engine runs here, so the file is parsed and checked instead: the
catalog URL is a psycopg URL (the driver tests/conftest.py's PostgreSQL runs
with) whose user, password, database and host match the postgres service;
the S3 endpoint reaches the workers as a storage option
(``client_kwargs.endpoint_url``, as in the tests' S3 fixture) and points at
the minio service; the workers and the demo use the scheduler's address;
the demo writes into the bucket the bucket service creates; and every
command parses with the real ``shardcat`` and ``dask`` command lines.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import typer
import yaml

from shardcat.catalog.session import create_catalog_engine
from shardcat.cli.app import app, parse_storage_options

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
SHARDCAT_SERVICES = ("scheduler", "worker-1", "worker-2", "demo", "serve")
WORKERS = ("worker-1", "worker-2")
# click's UsageError, wherever this typer takes click from (newer typers vendor it).
USAGE_ERROR: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"
)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(doc, dict) and isinstance(doc.get("services"), dict)
    return doc


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def _conftest_postgres_url() -> str:
    """tests/conftest.py's POSTGRES_URL (loaded by path: other conftest modules share its name)."""
    spec = importlib.util.spec_from_file_location("_root_conftest", ROOT / "tests" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.POSTGRES_URL)


def _command(service: dict[str, Any]) -> list[str]:
    command = service.get("command")
    assert command, "the service has no command"
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


def _option(args: list[str], *names: str) -> str:
    """The value of the option ``names`` in ``args`` (``--x v`` or ``--x=v``); it must occur once."""
    values = []
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                values.append(args[i + 1])
            elif arg.startswith(name + "="):
                values.append(arg.split("=", 1)[1])
    assert len(values) == 1, f"expected {names[0]} once in {args}, found {values}"
    return values[0]


def _container_ports(service: dict[str, Any]) -> set[int]:
    """The container side of ``ports`` (``"5432:5432"``, ``"127.0.0.1:5432:5432"``, long form)."""
    ports = set()
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            ports.add(int(entry["target"]))
        else:
            ports.add(int(str(entry).split(":")[-1].split("/")[0]))
    return ports


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # ["KEY=value", ...]
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def _demo_args(services: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The demo command split into shardcat's global options and the demo's own options."""
    args = _command(services["demo"])
    assert args[0] == "shardcat", args
    assert "demo" in args, args
    i = args.index("demo")
    return args[1:i], args[i + 1 :]


def _cli_params(
    global_args: list[str], demo_args: list[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Parse (never run) the demo command with the real ``shardcat`` command line."""
    group: Any = typer.main.get_command(app)
    # Options after the subcommand belong to it: a global option there is "no such option".
    ctx = group.make_context("shardcat", [*global_args, "demo"])
    demo = group.get_command(ctx, "demo")
    assert demo is not None
    sub = demo.make_context("demo", list(demo_args), parent=ctx)
    return ctx.params, sub.params


def _dask_params(args: list[str]) -> dict[str, Any]:
    """Parse (never run) a ``dask scheduler`` / ``dask worker`` command with distributed's CLI."""
    assert args[0] == "dask", args
    commands = {ep.name: ep for ep in importlib.metadata.entry_points(group="dask_cli")}
    assert args[1] in commands, f"no `dask {args[1]}` command"
    command = commands[args[1]].load()
    return dict(command.make_context(f"dask {args[1]}", args[2:]).params)


# --- services and image --------------------------------------------------------------


def test_services_exist(services: dict[str, Any]) -> None:
    for name in ("postgres", "minio", "create-bucket", *SHARDCAT_SERVICES):
        assert name in services, f"docker-compose.yml has no service {name!r}"


def test_shardcat_services_run_one_image_built_once_from_the_dockerfile(
    services: dict[str, Any],
) -> None:
    builders = [name for name in SHARDCAT_SERVICES if services[name].get("build")]
    assert builders == ["scheduler"], f"exactly one service builds the image, not {builders}"
    build = services["scheduler"]["build"]
    if isinstance(build, str):
        build = {"context": build}
    assert (ROOT / build["context"]).resolve() == ROOT
    assert build.get("dockerfile", "Dockerfile") == "Dockerfile"

    images = {services[name].get("image") for name in SHARDCAT_SERVICES}
    assert len(images) == 1 and None not in images, f"one image for all of them, not {images}"
    for name in SHARDCAT_SERVICES:
        if name != "scheduler":  # run the image the scheduler built, never one from a registry
            assert services[name].get("pull_policy") == "never", name
            assert "scheduler" in services[name]["depends_on"], name

    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    for path in ("pyproject.toml", "README.md", "src", "migrations", "constraints/dev.txt"):
        assert re.search(rf"^COPY .*\b{re.escape(path)}\b", dockerfile, re.MULTILINE), path
    install = re.search(r"pip install (.*)'\.\[([a-z0-9_,-]+)\]'(.*)$", dockerfile, re.MULTILINE)
    assert install, "the Dockerfile must pip install the repository with its extras"
    options = f"{install.group(1)} {install.group(3)}"
    assert "-c constraints/dev.txt" in options, "every package pinned by the constraints file"
    extras = set(install.group(2).split(","))
    known = set(importlib.metadata.metadata("shardcat").get_all("Provides-Extra") or [])
    assert extras <= known, f"unknown extras {extras - known}"
    assert {"s3", "postgres", "dask", "dashboard"} <= extras or "all" in extras
    # Nothing installed beside the extras: an unpinned extra package would escape the pins.
    assert not re.search(r"pip install .*'[a-z]+[<>=]", dockerfile), "add it to an extra instead"


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints" / "dev.txt").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.lower().replace("_", "-")] = version
    return pins


def test_every_package_the_image_installs_is_pinned() -> None:
    """The extras the Dockerfile installs, and what they need, are in constraints/dev.txt."""
    pins = _constraints()
    requirements = importlib.metadata.requires("shardcat") or []
    for extra in ("compression", "s3", "postgres", "dask", "dashboard", "serve"):
        wanted = [r for r in requirements if f'extra == "{extra}"' in r]
        assert wanted, extra
        for requirement in wanted:
            name = re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower()
            assert name in pins, f"{name} (extra {extra}) is not pinned in constraints/dev.txt"
    for name in ("bokeh", "dask", "distributed", "s3fs", "psycopg", "sqlalchemy", "numpy"):
        assert name in pins, name


def test_images_are_pinned_to_exact_versions(services: dict[str, Any]) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    bases = re.findall(r"^FROM\s+(\S+)", dockerfile, re.MULTILINE)
    assert bases and all(re.fullmatch(r"python:\d+\.\d+\.\d+-slim-[a-z]+", b) for b in bases), bases
    # The Python constraints/dev.txt was frozen with (the test suite's) is the image's Python.
    assert bases[0].split(":")[1].startswith(".".join(map(str, sys.version_info[:2])) + ".")
    for name, service in services.items():
        image = service["image"]
        if name in SHARDCAT_SERVICES:
            continue
        repo, _, tag = image.partition(":")
        assert tag and tag != "latest", f"{name}: {image} is not pinned"
        if repo == "postgres":
            assert re.fullmatch(r"\d+\.\d+(-[a-z]+)?", tag), (
                f"{name}: {image}, not postgres:MAJOR.MINOR"
            )
        else:
            assert re.search(r"\d", tag), f"{name}: {image} has no version in its tag"


def test_the_demo_waits_for_healthy_servers(services: dict[str, Any]) -> None:
    for name in ("postgres", "minio", "scheduler", *WORKERS):
        check = services[name].get("healthcheck")
        assert check and check.get("test"), f"{name} has no health check"
    for name in ("scheduler", *WORKERS):
        assert services["demo"]["depends_on"][name]["condition"] == "service_healthy", name
    assert services["demo"]["depends_on"]["postgres"]["condition"] == "service_healthy"

    # The Dask health checks ask the HTTP port each server listens on for /health.
    scheduler = _dask_params(_command(services["scheduler"]))
    assert str(scheduler["dashboard_address"]).rsplit(":", 1)[1] in str(
        services["scheduler"]["healthcheck"]["test"]
    )
    for name in WORKERS:
        worker = _dask_params(_command(services[name]))
        port = str(worker["dashboard_address"]).rsplit(":", 1)[1]
        test = str(services[name]["healthcheck"]["test"])
        assert f"localhost:{port}/health" in test, name


def test_the_api_serves_the_demos_catalog_behind_its_health_check(
    services: dict[str, Any],
) -> None:
    """The serve service: the demo's catalog and store, tokens required, /healthz checked."""
    from shardcat.serve import ServeConfig

    serve = services["serve"]
    args = _command(serve)
    assert args[0] == "shardcat" and "serve" in args, args
    i = args.index("serve")
    global_args, serve_args = args[1:i], args[i + 1 :]
    demo_globals, _ = _demo_args(services)
    assert global_args == demo_globals  # the same catalog and S3 endpoint as the demo
    group: Any = typer.main.get_command(app)
    ctx = group.make_context("shardcat", [*global_args, "serve"])
    command = group.get_command(ctx, "serve")
    assert command is not None
    params = command.make_context("serve", list(serve_args), parent=ctx).params
    assert params["host"] == "0.0.0.0" and not params["allow_anonymous"]
    # The options the server would start with are accepted (anonymous would be refused here).
    ServeConfig(catalogs=(("default", "sqlite://"),), host=params["host"], port=params["port"])
    assert params["port"] in _container_ports(serve)
    assert f"localhost:{params['port']}/healthz" in str(serve["healthcheck"]["test"])
    assert serve["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert _env(serve).get("SHARDCAT_CATALOG") == _option(global_args, "--catalog", "-c")
    assert serve.get("restart") == "unless-stopped"


def test_restart_policies(services: dict[str, Any]) -> None:
    for name in ("postgres", "minio", "scheduler", *WORKERS):
        assert services[name].get("restart") == "unless-stopped", name
    assert services["demo"].get("restart") == "no"  # a one-shot job is not rerun in a loop
    assert str(services["create-bucket"].get("restart", "")).startswith("on-failure")


def test_docker_compose_accepts_the_file() -> None:
    """``docker compose config`` where the compose plugin is installed (it needs no engine)."""
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("docker is not installed")
    probe = subprocess.run(
        [docker, "compose", "version"], capture_output=True, text=True, timeout=60, check=False
    )
    if probe.returncode != 0:
        pytest.skip("the docker compose plugin is not installed")
    result = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


# --- the catalog: PostgreSQL ---------------------------------------------------------


def test_catalog_url_matches_postgres_service(services: dict[str, Any]) -> None:
    from sqlalchemy.engine import make_url

    global_args, _ = _demo_args(services)
    url = _option(global_args, "--catalog", "-c")
    for name in (*WORKERS, "demo"):
        assert _env(services[name]).get("SHARDCAT_CATALOG") == url, name

    parsed = make_url(url)
    postgres = services["postgres"]
    env = _env(postgres)
    assert parsed.drivername == "postgresql+psycopg"
    assert parsed.host == "postgres"
    assert (parsed.port or 5432) == 5432 and 5432 in _container_ports(postgres)
    assert parsed.username == env.get("POSTGRES_USER", "postgres")
    assert parsed.password == env["POSTGRES_PASSWORD"]
    assert parsed.database == env.get("POSTGRES_DB", parsed.username)
    assert f"-U {parsed.username}" in str(postgres["healthcheck"]["test"])

    # The driver and dialect the test suite's real PostgreSQL runs with (no connection made).
    ours, tests = create_catalog_engine(url), create_catalog_engine(_conftest_postgres_url())
    try:
        assert (ours.dialect.name, ours.dialect.driver) == (
            tests.dialect.name,
            tests.dialect.driver,
        )
        assert ours.dialect.driver == "psycopg"
    finally:
        ours.dispose()
        tests.dispose()


# --- objects: MinIO --------------------------------------------------------------------


def test_s3_endpoint_is_a_storage_option_pointing_at_minio(services: dict[str, Any]) -> None:
    import s3fs

    global_args, _ = _demo_args(services)
    params, _ = _cli_params(global_args, [])
    options = parse_storage_options(params["storage_option"] or [])
    endpoint = options["client_kwargs"]["endpoint_url"]  # as in the tests' s3 fixture
    parts = urlsplit(endpoint)
    assert (parts.scheme, parts.hostname, parts.port) == ("http", "minio", 9000)

    minio = services["minio"]
    assert 9000 in _container_ports(minio)
    address = _option(_command(minio), "--address") if "--address" in _command(minio) else ":9000"
    assert address.rsplit(":", 1)[1] == "9000"

    # s3fs takes these options as they are (no connection is made).
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    assert fs.client_kwargs["endpoint_url"] == endpoint


def test_s3_credentials_agree(services: dict[str, Any]) -> None:
    minio = _env(services["minio"])
    user, password = minio["MINIO_ROOT_USER"], minio["MINIO_ROOT_PASSWORD"]
    for name in (*WORKERS, "demo"):  # s3fs (botocore) reads them from the environment
        env = _env(services[name])
        assert env.get("AWS_ACCESS_KEY_ID") == user, name
        assert env.get("AWS_SECRET_ACCESS_KEY") == password, name
    assert _env(services["worker-1"]) == _env(services["worker-2"]) == _env(services["demo"])


def test_demo_writes_into_the_bucket_created_at_start(services: dict[str, Any]) -> None:
    bucket_service = services["create-bucket"]
    assert bucket_service["depends_on"]["minio"]["condition"] == "service_healthy"
    alias = urlsplit(_env(bucket_service)["MC_HOST_local"])
    minio = _env(services["minio"])
    assert (alias.hostname, alias.port) == ("minio", 9000)
    assert (alias.username, alias.password) == (
        minio["MINIO_ROOT_USER"],
        minio["MINIO_ROOT_PASSWORD"],
    )
    mc = [*(bucket_service.get("entrypoint") or []), *_command(bucket_service)]
    assert "mb" in mc, mc
    created = mc[-1]
    assert created.startswith("local/"), mc
    bucket = created.split("/", 1)[1].strip("/")

    _, demo_args = _demo_args(services)
    out = urlsplit(_option(demo_args, "--out"))
    assert (out.scheme, out.netloc) == ("s3", bucket)
    assert services["demo"]["depends_on"]["create-bucket"]["condition"] == (
        "service_completed_successfully"
    )


# --- Dask -------------------------------------------------------------------------------


def test_workers_and_demo_use_the_scheduler(services: dict[str, Any]) -> None:
    from distributed import Scheduler

    scheduler = services["scheduler"]
    params = _dask_params(_command(scheduler))
    port = int(params["port"] or Scheduler.default_port)
    assert port == Scheduler.default_port == 8786
    assert 8786 in _container_ports(scheduler)
    address = f"tcp://scheduler:{port}"

    for name in WORKERS:
        worker = _dask_params(_command(services[name]))
        assert worker["scheduler"] == address, name
        assert "scheduler" in services[name]["depends_on"], name

    global_args, demo_args = _demo_args(services)
    _, demo = _cli_params(global_args, demo_args)
    assert demo["scheduler"] == address
    for name in ("postgres", "create-bucket", "scheduler", *WORKERS):
        assert name in services["demo"]["depends_on"], name


# --- the demo's command line ------------------------------------------------------------


def test_demo_command_parses_with_the_real_cli(services: dict[str, Any]) -> None:
    global_args, demo_args = _demo_args(services)
    params, demo = _cli_params(global_args, demo_args)
    assert params["catalog"] == _option(global_args, "--catalog", "-c")
    assert demo["out_dir"] == _option(demo_args, "--out")

    # And as `shardcat` itself runs it, up to the demo's --help (nothing else runs). In a
    # subprocess: the global options' callback configures logging and rich for the process.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHARDCAT_")}
    result = subprocess.run(
        [sys.executable, "-m", "shardcat", *global_args, "demo", *demo_args, "--help"],
        capture_output=True,
        text=True,
        env={**env, "COLUMNS": "200", "NO_COLOR": "1"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "shardcat demo" in result.stdout and "--scheduler" in result.stdout

    # Global options after the subcommand mean the same (every command takes them too).
    _, after = _cli_params([], [*demo_args, *global_args])
    assert after["catalog"] == _option(global_args, "--catalog", "-c")
    assert after["out_dir"] == _option(demo_args, "--out")
    with pytest.raises(USAGE_ERROR):  # and an option no command has is still refused
        _cli_params([], [*demo_args, "--no-such-option"])
