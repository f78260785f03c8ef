"""Dependencies point one way: the format reads through RangeSource and imports no IO library.

Checked statically, from each module's import statements, so no import
order or cached module can hide a violation.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import shardcat

SRC = Path(shardcat.__file__).parent

# Module (or package) -> what it must never import.
IO_LIBRARIES = ("fsspec", "s3fs", "sqlalchemy", "alembic", "psycopg", "dask", "distributed")
UPPER_LAYERS = ("shardcat.storage", "shardcat.catalog", "shardcat.orchestration", "shardcat.cli")
RULES = {
    "format": IO_LIBRARIES + UPPER_LAYERS,
    "_types.py": IO_LIBRARIES + UPPER_LAYERS + ("shardcat.format",),
    "_ranges.py": IO_LIBRARIES + UPPER_LAYERS + ("shardcat.format",),
    "_pread.py": IO_LIBRARIES + UPPER_LAYERS + ("shardcat.format",),
    # Storage may use fsspec, and nothing above it.
    "storage": (*IO_LIBRARIES[2:], "shardcat.catalog", "shardcat.orchestration", "shardcat.cli"),
}


def imports_of(path: Path) -> list[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved)."""
    package = ".".join(("shardcat", *path.relative_to(SRC).with_suffix("").parts[:-1]))
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names.append(module)
            # "from .. import storage" imports the package storage.
            names.extend(f"{module}.{alias.name}" for alias in node.names)
    return names


def modules(rule: str) -> list[Path]:
    target = SRC / rule
    return sorted(target.rglob("*.py")) if target.is_dir() else [target]


@pytest.mark.parametrize("rule", sorted(RULES))
def test_layers_import_only_what_is_below_them(rule):
    forbidden = RULES[rule]
    found = [
        f"{path.relative_to(SRC)} imports {name}"
        for path in modules(rule)
        for name in imports_of(path)
        if any(name == f or name.startswith(f + ".") for f in forbidden)
    ]
    assert found == []


def test_the_checker_sees_relative_imports():
    names = imports_of(SRC / "storage" / "shards.py")
    assert "shardcat.format.reader" in names or "shardcat.format" in names
    assert "shardcat._types" in names
