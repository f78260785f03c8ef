"""The quickstart notebook runs top to bottom in a Jupyter kernel of this very Python.

The kernel is started from a kernelspec written here (``sys.executable -m
ipykernel_launcher``) and found only in a temporary folder, so that neither
a user's nor a system's ``python3`` kernelspec can run the notebook with
another interpreter. The notebook works in a temporary folder of its own.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOK = NOTEBOOKS / "quickstart.ipynb"

# Prepended to the notebook before it runs: where the kernel's Python is.
_PROBE = "import json, sys\nprint(json.dumps({'executable': sys.executable, 'prefix': sys.prefix}))"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_quickstart", NOTEBOOKS / "make_quickstart.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _kernel_manager(tmp_path: Path) -> KernelManager:
    """A manager for a ``python3`` kernel that runs this interpreter, and nothing else."""
    spec_dir = tmp_path / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (shardcat tests)",
        "language": "python",
        # debugpy's warning about frozen modules would otherwise go to the kernel's stderr.
        "env": {"PYDEVD_DISABLE_FILE_VALIDATION": "1"},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    specs = KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")], ensure_native_kernel=False)
    return KernelManager(kernel_name="python3", kernel_spec_manager=specs)


def _outputs(nb: Any, cell_id: str) -> list[Any]:
    for cell in nb.cells:
        if cell.get("id") == cell_id:
            return list(cell.get("outputs", []))
    raise AssertionError(f"the notebook has no cell {cell_id!r}")


def _stdout(nb: Any, cell_id: str) -> str:
    return "".join(
        o.get("text", "")
        for o in _outputs(nb, cell_id)
        if o.get("output_type") == "stream" and o.get("name") == "stdout"
    )


def _mime_types(nb: Any, cell_id: str) -> set[str]:
    return {mime for o in _outputs(nb, cell_id) for mime in o.get("data", {})}


def test_notebook_is_generated_without_outputs() -> None:
    """The committed notebook is exactly what notebooks/make_quickstart.py writes."""
    assert NOTEBOOK.read_text(encoding="utf-8") == _generator().render(), (
        "notebooks/quickstart.ipynb is out of date: run .venv/bin/python notebooks/make_quickstart.py"
    )
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    assert nb.metadata.kernelspec.name == "python3"


@pytest.mark.slow
def test_quickstart_notebook_runs(tmp_path: Path) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    probe = nbformat.v4.new_code_cell(_PROBE)
    probe.id = "test-probe"
    nb.cells.insert(0, probe)
    workdir = tmp_path / "work"
    workdir.mkdir()

    client = NotebookClient(
        nb,
        km=_kernel_manager(tmp_path),
        kernel_name="python3",
        timeout=300,
        resources={"metadata": {"path": str(workdir)}},
    )
    t0 = time.perf_counter()
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on any error
    seconds = time.perf_counter() - t0
    print(f"quickstart.ipynb ran in {seconds:.1f} s")

    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors

    # The kernel is this interpreter (the venv's, when run through scripts/test.sh).
    where = json.loads(_stdout(nb, "test-probe"))
    assert where["prefix"] == sys.prefix
    assert Path(where["executable"]) == Path(sys.executable)

    assert "2,000 samples" in _stdout(nb, "samples")
    # Crops of a real photograph, keyed by where they come from.
    assert re.search(
        r"e\.g\. '(top|middle|bottom)-(left|center|right)/000000'", _stdout(nb, "samples")
    )
    assert "4 tail shards (one per partition)" in _stdout(nb, "shard-sizes")
    assert re.search(r"median latency: \d+ µs", _stdout(nb, "latency"))
    assert "committed 2,000 records" in _stdout(nb, "write")
    assert "4/4 partitions, 2,000 records" in _stdout(nb, "write")  # the progress callback
    assert "text/html" in _mime_types(nb, "sql-shards")  # DataFrames render as tables
    assert "text/html" in _mime_types(nb, "sql-labels")
    # The looked-up sample's PNG is displayed as is; the figures are PNGs too.
    for cell_id in ("lookup", "batch", "shard-sizes", "latency"):
        assert "image/png" in _mime_types(nb, cell_id), cell_id
    assert "missing: ['no/such-key']" in _stdout(nb, "batch")
    assert "streamed 2,000 samples" in _stdout(nb, "stream")
    assert "no problems" in _stdout(nb, "verify")
    assert not any(workdir.iterdir()), "the notebook must not write into its working folder"
