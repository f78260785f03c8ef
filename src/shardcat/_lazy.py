"""Modules imported on first use, so that opening a catalog loads only what a lookup needs."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["lazy_module"]


class _LazyModule:
    """Stands for a module until an attribute is read; then it is imported (once, by Python)."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def lazy_module(name: str) -> Any:
    """``name`` (absolute), imported when one of its attributes is first read.

    Use it as ``if TYPE_CHECKING: from . import m`` / ``else: m = lazy_module(...)``
    so that type checkers see the module itself.
    """
    return _LazyModule(name)
