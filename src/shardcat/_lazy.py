"""Modules imported on first use, so that opening a catalog loads only what a lookup needs."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_module", "lazy_names"]


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


def lazy_names(package: str, names: Mapping[str, str | tuple[str, str]]) -> Callable[[str], Any]:
    """A package's ``__getattr__``: ``names[name]``'s module (relative to ``package``) imported on first use.

    A value is a module (``".cache"``), or a module and the name it defines
    there (``(".recordcodec", "active")``). The value is then kept in the
    package, so the next access skips the function.
    """

    def __getattr__(name: str) -> Any:
        where = names.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attr = (where, name) if isinstance(where, str) else where
        value = getattr(importlib.import_module(module, package), attr)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
