"""Which tar walker runs: the compiled member loop, or the pure-Python reference.

Both find the same members with the same CRC32Cs and raise the same errors:
the compiled loop (``_ctar.c``, built with the package when a C compiler is
present) walks the member groups of a buffered chunk that it accepts and
stops in front of any other; :class:`~.walk.TarWalker` (the reference)
reads that group, and raises its error or accepts it. The same goes for
grouping members into samples: with the compiled walker, ``scan_tar`` keeps
the members of each chunk in one C block (:data:`walk_block`) and groups
them into the footer's record and entry rows in C (:data:`Grouper`), and
``scan._Grouper`` (the reference) decides every member that code stops at.

``SHARDCAT_TAR_WALKER`` chooses, when shardcat is imported (as
``SHARDCAT_RECORD_CODEC`` does for the record codec):

``auto`` (default)
    The compiled walker if it was built, else the reference.
``compiled``
    The compiled walker; importing shardcat fails if it was not built.
``python``
    The reference alone.

:func:`active` tells which one runs; :func:`use` switches (tests and
benchmarks run both). The walker looks :data:`walk` up here when it starts.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ... import config
from .. import implementations
from ..implementations import Name

__all__ = [
    "ENV_VAR",
    "BlockResult",
    "Grouper",
    "WalkResult",
    "active",
    "available",
    "headers",
    "use",
    "walk",
    "walk_block",
]

ENV_VAR = config.env_var("tar_walker")

WalkResult = tuple[
    int, int, int, bytes | None, list[bytes], list[int], list[int], list[int], list[int]
]
"""``(stop, members, skipped, global_path, names, first_headers, payloads, sizes, crcs)``."""

BlockResult = tuple[int, int, int, bytes | None, Any]
"""``(stop, members, skipped, global_path, block)``: :data:`WalkResult` with the members in
one opaque ``_ctar.Members`` block (``None`` when there are none)."""

_compiled: Any
_missing: ImportError | None = None
try:
    _compiled = importlib.import_module(f"{__package__}._ctar")
except ImportError as e:  # built without a compiler, or a source checkout not built
    _compiled = None
    _missing = e

walk: Callable[[Any, int, int, int, int, bytes | None], WalkResult] | None
"""The compiled member loop, or ``None`` when the reference walks alone."""
walk_block: Callable[[Any, int, int, int, int, bytes | None], BlockResult] | None
"""The compiled member loop keeping its members in a C block, or ``None``."""
headers: Callable[[Any, list[int]], list[int]] | None
"""The compiled header-checksum check (indexes it does not accept), or ``None``."""
Grouper: Callable[[], Any] | None
"""The compiled sample grouping (``_ctar.Grouper``: blocks to footer rows), or ``None``."""
COMPONENT = "tar walker"

# The reference walker (walk.py) and grouping (scan.py) run alone where these are None.
_PYTHON: dict[str, Any] = {"walk": None, "walk_block": None, "headers": None, "Grouper": None}

implementations.register(
    implementations.Component(
        COMPONENT,
        ENV_VAR,
        globals(),
        _PYTHON,
        {} if _compiled is None else {name: getattr(_compiled, name) for name in _PYTHON},
        built=lambda: _compiled is not None,
        missing=lambda: _missing,
    )
)


def available() -> list[Name]:
    """The walkers this installation has: always ``"python"``, and ``"compiled"`` if it was built."""
    return implementations.available(COMPONENT)


def active() -> Name:
    """The walker in use: ``"compiled"`` or ``"python"``."""
    return implementations.active(COMPONENT)


def use(name: str) -> Name:
    """Switch to walker ``name`` (``"compiled"``, ``"python"`` or ``"auto"``); returns the previous one.

    Raises
    ------
    CodecUnavailableError
        ``"compiled"`` was asked for but the extension was not built.
    ValueError
        An unknown name.
    """
    return implementations.use(COMPONENT, name)


use(implementations.configured(COMPONENT))
