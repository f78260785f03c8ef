"""The wheel is whole: built from this checkout and installed in a fresh venv, it upgrades a catalog.

The migrations live in the top-level ``migrations/`` folder and install as the
``shardcat.migrations`` package through a ``package-dir`` mapping, which
needs its packages listed by hand: this test fails if one is left out, and if
the installed ``shardcat catalog upgrade`` cannot find the migration scripts.

The venv borrows this one's dependencies through a ``.pth`` line (installing
them would take a minute) but not its editable shardcat: a path a ``.pth``
file adds is not scanned for further ``.pth`` files, so the editable finder
never loads there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Any

import pytest

from shardcat.catalog import head_revision

ROOT = Path(__file__).parents[1]
pytestmark = pytest.mark.slow


def _run(
    *args: str | Path, cwd: Path, env_extra: dict[str, str] | None = None, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(env_extra or {})
    p = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        **kwargs,
    )
    assert p.returncode == 0, f"{args}: {p.stdout}\n{p.stderr}"
    return p


def _build_wheel(work: Path, env: dict[str, str] | None = None) -> Path:
    """The wheel, built from a copy of the sources (a stale build/ folder or
    an extension built in place cannot leak in)."""
    tree = work / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, tree / name)
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.so", "*.pyd")
    for folder in ("src", "migrations"):
        shutil.copytree(ROOT / folder, tree / folder, ignore=skip, symlinks=True)
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "--wheel-dir",
        work / "dist",
        tree,
        cwd=work,
        env_extra=env,
    )
    (built,) = (work / "dist").glob("shardcat-*.whl")
    return built


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_wheel(tmp_path_factory.mktemp("wheel"))


def _expected_files() -> set[str]:
    """What the wheel must hold under shardcat/: every module, plus the data files."""
    files = {
        "shardcat/" + p.relative_to(ROOT / "src" / "shardcat").as_posix()
        for p in (ROOT / "src" / "shardcat").rglob("*.py")
    }
    files |= {
        "shardcat/migrations/" + p.relative_to(ROOT / "migrations").as_posix()
        for p in (ROOT / "migrations").rglob("*.py")
    }
    return files | {
        # The compiled record codec (src/shardcat/format/ccodec/), built for this Python.
        "shardcat/format/_ccodec" + sysconfig.get_config_var("EXT_SUFFIX"),
        # Guarded read-only mappings (src/shardcat/format/_cmapguard.c).
        "shardcat/format/_cmapguard" + sysconfig.get_config_var("EXT_SUFFIX"),
        # The compiled tar walker (src/shardcat/format/tar/_ctar.c, _samples.c).
        "shardcat/format/tar/_ctar" + sysconfig.get_config_var("EXT_SUFFIX"),
        # The write-behind of local shard blocks (src/shardcat/storage/_cwrite.c).
        "shardcat/storage/_cwrite" + sysconfig.get_config_var("EXT_SUFFIX"),
        # The compiled SQLite point lookup (src/shardcat/reading/_cpoint.c).
        "shardcat/reading/_cpoint" + sysconfig.get_config_var("EXT_SUFFIX"),
        "shardcat/py.typed",
        "shardcat/migrations/script.py.mako",
        "shardcat/migrations/README.md",
        # shardcat serve's page, served from the installed package.
        "shardcat/serve/static/index.html",
        "shardcat/serve/static/style.css",
        "shardcat/serve/static/app.js",
    }


def test_the_wheel_holds_every_module_and_the_migrations(wheel):
    with zipfile.ZipFile(wheel) as z:
        shipped = {n for n in z.namelist() if n.startswith("shardcat/")}
    assert shipped == _expected_files()


def test_the_wheel_carries_both_licences(wheel):
    # shardcat's own Apache-2.0 text and the vendored xxHash's BSD-2-Clause notice.
    with zipfile.ZipFile(wheel) as z:
        licences = {
            n.rsplit(".dist-info/", 1)[1]: z.read(n) for n in z.namelist() if "/licenses/" in n
        }
        metadata = next(z.read(n) for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    assert set(licences) == {"licenses/LICENSE", "licenses/src/shardcat/_vendor/xxhash/LICENSE"}
    assert b"Apache License" in licences["licenses/LICENSE"]
    assert b"BSD 2-Clause" in licences["licenses/src/shardcat/_vendor/xxhash/LICENSE"]
    assert b"License-Expression: Apache-2.0 AND BSD-2-Clause" in metadata


def test_the_installed_wheel_upgrades_a_catalog_to_head(wheel, tmp_path):
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    site = _run(
        python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path
    ).stdout.strip()
    # This venv's dependencies, but no .pth of its own: its editable shardcat stays out.
    (Path(site) / "borrowed-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--quiet",
        "--no-deps",
        "--no-index",
        wheel,
        cwd=tmp_path,
    )
    where = json.loads(
        _run(
            python,
            "-c",
            "import json, shardcat, shardcat.migrations, shardcat.format as f; "
            "print(json.dumps([shardcat.__file__, shardcat.migrations.__file__, f.record_codec()]))",
            cwd=tmp_path,
        ).stdout
    )
    *files, codec = where
    assert all(Path(f).is_relative_to(Path(site)) for f in files), where
    assert codec == "compiled"

    shardcat = venv / "bin" / "shardcat"
    db = f"sqlite:///{tmp_path / 'catalog.db'}"
    upgraded = json.loads(
        _run(shardcat, "--json", "catalog", "upgrade", "--catalog", db, cwd=tmp_path).stdout
    )
    assert (upgraded["from"], upgraded["to"]) == (None, head_revision())
    state = json.loads(
        _run(shardcat, "--json", "catalog", "current", "--catalog", db, cwd=tmp_path).stdout
    )
    assert (state["revision"], state["head"], state["at_head"]) == (
        head_revision(),
        head_revision(),
        True,
    )


def test_without_a_compiler_the_wheel_builds_and_runs_the_python_codec(tmp_path):
    """The extension is optional: a machine with no C compiler still gets a working wheel."""
    built = _build_wheel(tmp_path, env={"CC": str(tmp_path / "no-such-compiler")})
    with zipfile.ZipFile(built) as z:
        shipped = {n for n in z.namelist() if n.startswith("shardcat/")}
    compiled = ("_ccodec", "_cmapguard", "_ctar", "_cwrite", "_cpoint")
    assert shipped == {f for f in _expected_files() if not any(c in f for c in compiled)}
    site = tmp_path / "site"
    with zipfile.ZipFile(built) as z:
        z.extractall(site)
    code = (
        "import shardcat.format as f, shardcat.format.recordcodec as rc; "
        "import shardcat.format.tar.tarwalker as tw; "
        "import shardcat.reading.point as pt; "
        "import shardcat.format.mapguard as mg; "
        "print(f.record_codec(), rc.available(), tw.active(), tw.available(), "
        "pt.active(), pt.available(), mg.available())"
    )
    out = _run(sys.executable, "-c", code, cwd=tmp_path, env_extra={"PYTHONPATH": str(site)})
    assert out.stdout.split() == [
        "python",
        "['python']",
        "python",
        "['python']",
        "python",
        "False",
        "False",  # users' files are read, never mapped without the guard
    ]
