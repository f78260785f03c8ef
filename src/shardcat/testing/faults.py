"""``faulty://``: a local filesystem that fails the Nth read or write, for fault-injection tests.

The reliability suite drives shardcat's write, lookup and verify paths over
this filesystem and checks that every injected fault ends in a typed error or
a retry that succeeds, never in lost, duplicated or wrong data::

    from shardcat.testing.faults import FaultPlan, register

    plan = FaultPlan(tmp_path / "plan.json")
    register(plan.path)                  # in this process; client.run(register, path) on workers
    plan.arm("read", nth=3, mode="short")  # the 3rd read from now returns half its bytes
    ...                                  # faulty:///abs/path URLs behave like local paths

A plan is a small JSON file with a counter, shared by every process that
registered it (updates are serialised with ``fcntl.flock``), so a fault armed
in the test fires in whichever Dask worker makes the Nth call. Modes:

* ``error``: ``OSError(EIO)``, what a failing disk or connection raises;
* ``timeout``: ``TimeoutError``, what a store that stops answering raises;
* ``short``: a read returns only the first half of the bytes asked for
  (reads only), what a truncated transfer looks like to a careless reader.

``count`` consecutive calls fail from the Nth on (default 1: a transient
fault that a retry survives; a large count: a fault that lasts).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

__all__ = ["PROTOCOL", "FaultPlan", "FaultyFileSystem", "register"]

PROTOCOL = "faulty"
_MODES = ("error", "timeout", "short")


@dataclass
class FaultPlan:
    """The shared plan file: which operation fails, from which call on, how, how many times."""

    path: Path

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if not self.path.exists():
            self.disarm()

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        with open(self.path, "r+" if self.path.exists() else "w+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            text = f.read()
            state: dict[str, Any] = json.loads(text) if text else {}
            yield state
            f.seek(0)
            f.truncate()
            f.write(json.dumps(state))

    def arm(self, op: str, *, nth: int, mode: str = "error", count: int = 1) -> None:
        """From now on, calls ``nth`` to ``nth + count - 1`` of ``op`` ("read"/"write") fail."""
        if op not in ("read", "write") or mode not in _MODES or nth < 1 or count < 1:
            raise ValueError(f"bad fault: op={op!r} nth={nth} mode={mode!r} count={count}")
        if mode == "short" and op != "read":
            raise ValueError("short applies to reads only")
        with self._locked() as state:
            state.clear()
            state.update(op=op, nth=nth, mode=mode, count=count, calls=0, fired=0)

    def disarm(self) -> None:
        with self._locked() as state:
            state.clear()

    @property
    def fired(self) -> int:
        """How many calls have failed since :meth:`arm`."""
        with self._locked() as state:
            return int(state.get("fired", 0))

    def tick(self, op: str) -> str | None:
        """Count one call of ``op``; the fault's mode if this call must fail."""
        with self._locked() as state:
            if state.get("op") != op:
                return None
            state["calls"] += 1
            if state["nth"] <= state["calls"] < state["nth"] + state["count"]:
                state["fired"] += 1
                return str(state["mode"])
            return None


def _raise(mode: str, what: str) -> None:
    if mode == "timeout":
        raise TimeoutError(f"injected timeout: {what}")
    raise OSError(errno.EIO, f"injected I/O error: {what}")


class _FaultyFile:
    """A file object whose reads and writes go through the plan."""

    def __init__(self, fs: FaultyFileSystem, f: Any, path: str) -> None:
        self._fs, self._f, self._path = fs, f, path

    def read(self, size: int = -1) -> bytes:
        mode = self._fs.plan_tick("read")
        data: bytes = self._f.read(size)
        if mode == "short":
            return data[: len(data) // 2]
        if mode:
            _raise(mode, f"read of {self._path}")
        return data

    def write(self, data: Any) -> int:
        mode = self._fs.plan_tick("write")
        if mode:
            _raise(mode, f"write to {self._path}")
        return int(self._f.write(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)

    def __enter__(self) -> _FaultyFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._f)


class FaultyFileSystem(LocalFileSystem):  # type: ignore[misc]  # fsspec is untyped
    """Local files under ``faulty://``, failing as the registered plan says."""

    protocol = PROTOCOL
    root_marker = "/"
    plan_path: str | None = None

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        path = str(path)
        if path.startswith(f"{PROTOCOL}://"):
            path = path[len(PROTOCOL) + 3 :]
        return super()._strip_protocol(path)

    def unstrip_protocol(self, name: str) -> str:
        return f"{PROTOCOL}://{self._strip_protocol(name)}"

    def plan_tick(self, op: str) -> str | None:
        if self.plan_path is None:
            return None
        return FaultPlan(Path(self.plan_path)).tick(op)

    def cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kw: Any
    ) -> bytes:
        mode = self.plan_tick("read")
        data: bytes = super().cat_file(path, start=start, end=end, **kw)
        if mode == "short":
            return data[: len(data) // 2]
        if mode:
            _raise(mode, f"read of {path}")
        return data

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kw: Any) -> None:
        fault = self.plan_tick("write")
        if fault:
            _raise(fault, f"write to {path}")
        super().pipe_file(path, value, mode=mode, **kw)

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        return _FaultyFile(self, super()._open(path, mode, **kwargs), path)


def register(plan_path: str | os.PathLike[str] | None) -> None:
    """Make ``faulty://`` available in this process, failing as the plan at ``plan_path`` says."""
    FaultyFileSystem.plan_path = None if plan_path is None else str(plan_path)
    fsspec.register_implementation(PROTOCOL, FaultyFileSystem, clobber=True)
    FaultyFileSystem.clear_instance_cache()
