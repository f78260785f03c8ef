"""The layers are stated once, in pyproject's import-linter contracts; these tests keep that statement whole.

``lint-imports`` checks every import against the contracts (also imports
inside functions and under ``TYPE_CHECKING``). What it cannot check is a
contract that forgets a module: a subpackage or root module named in no
layer is bound by no layer rule. So every module of the package must be
named in the layers contract, every module a contract names must exist,
and the contracts must hold (lint-imports, run here too). Nor can a
contract allow only some modules: the CLI may import the catalog's and the
read layer's public names and nothing else of them, checked on the source.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).parents[1]
SRC = ROOT / "src"
PACKAGE = SRC / "shardcat"
# What the CLI may import of these layers: the names of their __init__, and
# the public package behind `shardcat sql`.
CLI_PUBLIC = ("shardcat.catalog", "shardcat.reading")
CLI_ALLOWED = ("shardcat.catalog.readonly",)


def _contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def _layered_modules() -> set[str]:
    """Every module named in a layer of the layers contract."""
    (layers,) = [c for c in _contracts() if c["type"] == "layers"]
    named: set[str] = set()
    for layer in layers["layers"]:  # type: ignore[attr-defined]
        for part in layer.replace(":", "|").split("|"):
            named.add(part.strip())
    return named


def _package_modules() -> set[str]:
    """``shardcat.<name>`` for each subpackage and each module at the package's root."""
    found = set()
    for path in PACKAGE.iterdir():
        if path.is_dir() and (path / "__init__.py").is_file():
            found.add(f"shardcat.{path.name}")
        elif path.suffix == ".py" and path.name != "__init__.py":
            found.add(f"shardcat.{path.stem}")
    return found


def _exists(dotted: str) -> bool:
    rel = Path(*dotted.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


def test_every_subpackage_and_root_module_has_a_layer():
    assert sorted(_package_modules() - _layered_modules()) == []


def test_every_module_a_contract_names_exists():
    named: set[str] = set(_layered_modules())
    for contract in _contracts():
        for field in ("source_modules", "forbidden_modules"):
            named.update(contract.get(field, []))  # type: ignore[arg-type]
    ours = sorted(m for m in named if m.startswith("shardcat.") and not _exists(m))
    assert ours == []


def test_the_contracts_hold():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    lint = Path(sys.executable).with_name("lint-imports")
    p = subprocess.run(
        [str(lint), "--no-cache", "--config", str(ROOT / "pyproject.toml")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
        env=env,
    )
    assert p.returncode == 0, p.stdout + p.stderr


def imports_of(path: Path, src: Path = SRC) -> list[tuple[int, str]]:
    """(line, absolute dotted module) of every import in a module, relative ones resolved."""
    module = ".".join(path.relative_to(src).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    package = package.removesuffix(".__init__")
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.append((node.lineno, name))
            # `from . import x` / `from ..catalog import models`: x may be a module.
            found.extend((node.lineno, f"{name}.{alias.name}") for alias in node.names)
    return found


def _matches(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_cli_uses_only_the_public_names_of_the_catalog_and_reading():
    bad = [
        f"{path.relative_to(SRC)}:{line}: {name}"
        for path in sorted((PACKAGE / "cli").rglob("*.py"))
        for line, name in imports_of(path)
        if any(_matches(name, public) and name != public for public in CLI_PUBLIC)
        and _exists(name)
        and not any(_matches(name, allowed) for allowed in CLI_ALLOWED)
    ]
    assert bad == []


def test_the_checker_sees_relative_and_lazy_imports(tmp_path):
    folder = tmp_path / "shardcat" / "cli"
    folder.mkdir(parents=True)
    module = folder / "probe.py"
    module.write_text(
        "from ..catalog import session\n"
        "def f():\n"
        "    from ..catalog.models import Shard\n"
        "    import sqlalchemy\n"
    )
    assert imports_of(module, tmp_path) == [
        (1, "shardcat.catalog"),
        (1, "shardcat.catalog.session"),
        (3, "shardcat.catalog.models"),
        (3, "shardcat.catalog.models.Shard"),
        (4, "sqlalchemy"),
    ]
