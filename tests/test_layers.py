"""Dependencies point one way: each layer's modules import nothing from the layers above it.

Checked on the source (every import statement, also inside functions), so a
lazy import cannot slip a dependency past the rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).parents[1] / "src"
PACKAGE = SRC / "shardcat"

# Layer (a subpackage) -> modules it must never import (prefixes of dotted names).
FORBIDDEN = {
    "format": (
        "fsspec",
        "sqlalchemy",
        "alembic",
        "dask",
        "distributed",
        "shardcat.storage",
        "shardcat.catalog",
        "shardcat.orchestration",
        "shardcat.cli",
    ),
    "storage": (
        "sqlalchemy",
        "alembic",
        "dask",
        "distributed",
        "shardcat.catalog",
        "shardcat.orchestration",
        "shardcat.cli",
    ),
    "catalog": ("dask", "distributed", "shardcat.orchestration", "shardcat.cli"),
    "orchestration": ("shardcat.cli",),
    # The CLI parses, calls the library and prints: no SQL of its own.
    "cli": ("sqlalchemy", "alembic"),
    # Training readers sit beside the CLI, above orchestration, and need no torch.
    "readers": ("shardcat.cli",),
}
# Only shardcat.torch imports torch (the torch extra); nothing below it imports the readers.
for _layer in FORBIDDEN:
    FORBIDDEN[_layer] += ("torch", "shardcat.torch")
    if _layer != "readers":
        FORBIDDEN[_layer] += ("shardcat.readers",)
# What the CLI may import from the catalog: the names of its __init__, and the
# public package behind `shardcat sql`.
CLI_CATALOG_PUBLIC = "shardcat.catalog"
CLI_CATALOG_ALLOWED = ("shardcat.catalog.readonly",)


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


def _is_module(dotted: str) -> bool:
    rel = Path(*dotted.split(".")[1:]) if dotted.startswith("shardcat.") else None
    return rel is not None and (
        (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()
    )


def _matches(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_nothing_from_above(layer):
    bad = [
        f"{path.relative_to(SRC)}:{line}: {name}"
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        for line, name in imports_of(path)
        if any(_matches(name, prefix) for prefix in FORBIDDEN[layer])
        # `from ..catalog import Catalog` names a class, not a forbidden module
        and (not name.startswith("shardcat.") or _is_module(name))
    ]
    assert bad == []


def test_cli_uses_only_the_catalogs_public_names():
    bad = [
        f"{path.relative_to(SRC)}:{line}: {name}"
        for path in sorted((PACKAGE / "cli").rglob("*.py"))
        for line, name in imports_of(path)
        if _matches(name, CLI_CATALOG_PUBLIC)
        and name != CLI_CATALOG_PUBLIC
        and _is_module(name)
        and not any(_matches(name, allowed) for allowed in CLI_CATALOG_ALLOWED)
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
