"""Every Python that ``requires-python`` admits builds the C extensions and passes the codec's tests.

The test command runs on one interpreter; the compiled codec leans on
CPython's internals (``format/ccodec/ccodec.h``, behind the
``cpython_tricks`` switch), which change between releases. So for each other
``3.X`` in the range, found on this machine (pyenv's versions or
``python3.X`` on the PATH), a fresh venv installs shardcat from this
checkout (its wheel compiles the extensions for that interpreter) with the
compression extra, and runs the tests of the compiled codec against its
Python twins, the CPython tricks and the record layouts there. In CI every
admitted version must be found: an interpreter CI cannot test is one
``requires-python`` must not admit.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# The codec against its twins, with its tricks switched off, its lifetimes and its GC.
SUITE = [
    "tests/format/test_cpython_tricks.py",
    "tests/format/test_record_codecs.py",
    "tests/format/test_ccodec_lifetimes.py",
    "tests/format/test_lazy_gc.py",
    "tests/format/test_decode_batch.py",
    "tests/fuzz/test_fuzz_codec.py",
]


def admitted() -> list[str]:
    """The ``3.X`` versions ``requires-python`` admits (``>=3.A,<3.B``)."""
    found = re.search(
        r'^requires-python\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M
    )
    assert found, "pyproject.toml has no requires-python"
    spec = found[1]
    low = re.search(r">=\s*3\.(\d+)", spec)
    high = re.search(r"<\s*3\.(\d+)", spec)
    assert low and high, f"requires-python {spec!r} is not of the form >=3.A,<3.B"
    return [f"3.{minor}" for minor in range(int(low[1]), int(high[1]))]


def interpreter(version: str) -> str | None:
    """A ``python3.X`` executable for ``version`` on this machine, or None."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    if pyenv.is_dir():
        for found in sorted(pyenv.glob(f"{version}.*"), reverse=True):
            exe = found / "bin" / "python"
            if re.fullmatch(rf"{re.escape(version)}\.\d+", found.name) and exe.exists():
                return str(exe)
    return shutil.which(f"python{version}")


OTHERS = [v for v in admitted() if v != f"{sys.version_info[0]}.{sys.version_info[1]}"]


@pytest.mark.slow
@pytest.mark.parametrize("version", OTHERS)
def test_the_compiled_codec_on_every_admitted_python(version, tmp_path):
    exe = interpreter(version)
    if exe is None:
        if IN_CI:
            pytest.fail(
                f"requires-python admits Python {version}, which this machine lacks: install it "
                "(pyenv install) or narrow requires-python to the versions CI can test"
            )
        pytest.skip(f"Python {version} is not installed")
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"

    # Nothing of this interpreter's environment (PYTHONPATH, a src/ checkout) reaches the venv.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}

    def run(*args: str, timeout: float) -> None:
        p = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=tmp_path,
            env=env,
        )
        assert p.returncode == 0, (
            f"{' '.join(args[:4])} ...\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        )

    run(exe, "-m", "venv", str(venv), timeout=120)
    run(
        str(python),
        "-m",
        "pip",
        "install",
        "--quiet",
        f"{ROOT}[compression]",
        "pytest>=8",
        "pytest-timeout>=2.3",
        "hypothesis>=6.100",
        timeout=900,
    )
    # The tests run from this checkout, against the installed wheel (no src/ on the path).
    p = subprocess.run(
        [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-q", "-x", *SUITE],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=ROOT,
        env=env,
    )
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    check = subprocess.run(
        [
            str(python),
            "-c",
            "import shardcat.format.recordcodec as r, shardcat;"
            "print(r.active(), shardcat.__file__)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env=env,
    )
    active, where = check.stdout.split()
    assert active == "compiled", check.stderr
    assert str(venv) in where  # the installed wheel's, built for this interpreter
