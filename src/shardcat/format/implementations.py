"""One registry of implementations: each accelerated component's compiled and Python sides.

A component (the record codec, the tar walker, the point lookup) registers
the module whose names it rebinds, the Python implementation of each name
(the reference, or a twin with the compiled function's signature) and the
compiled one (empty where the extension was not built). :func:`use` switches
a component by rebinding those names in its module once, so callers keep
looking a function up as ``recordcodec.decode_record`` and pay nothing per
call for the choice. The component modules' own ``use``/``active``/
``available`` are this module's functions for their component.

Which implementation a component starts with is read by :func:`configured`
alone, when its module is imported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .. import config
from ..errors import CodecUnavailableError

__all__ = [
    "Component",
    "Name",
    "active",
    "available",
    "choose",
    "components",
    "configured",
    "cpython_tricks",
    "register",
    "use",
]

Name = Literal["compiled", "python"]


@dataclass(eq=False)
class Component:
    """An accelerated component: what :func:`use` rebinds, and whether the compiled side is there."""

    name: str
    """What errors call it (``"record codec"``)."""
    env_var: str
    """The setting that chooses it (``SHARDCAT_RECORD_CODEC``)."""
    namespace: dict[str, Any]
    """The module globals its implementations are bound to."""
    python: Mapping[str, Any]
    """Each name's Python implementation."""
    compiled: Mapping[str, Any]
    """Each name's compiled implementation (the same names; empty where not built)."""
    built: Callable[[], bool]
    """Whether the compiled side can run (asked at each :func:`use`)."""
    missing: Callable[[], BaseException | None] = lambda: None
    """Why it cannot, for the error of ``use("compiled")``."""
    current: Name = field(default="python", init=False)


_COMPONENTS: dict[str, Component] = {}


def register(component: Component) -> Component:
    """Add ``component`` (by its name; registering a name again replaces it)."""
    if component.compiled and set(component.compiled) != set(component.python):
        raise ValueError(
            f"{component.name}: the compiled and Python sides name different functions"
        )
    _COMPONENTS[component.name] = component
    return component


def components() -> list[str]:
    """The registered components' names."""
    return list(_COMPONENTS)


def configured(component: str) -> str:
    """The implementation ``component`` is set to use: its setting, ``"auto"`` by default."""
    key = _COMPONENTS[component].env_var.removeprefix(config.ENV_PREFIX).lower()
    return str(config.get(key))


def cpython_tricks() -> bool:
    """Whether the compiled codec may use its CPython-internal tricks (``format/ccodec/ccodec.h``).

    On unless the ``cpython_tricks`` setting is off (``SHARDCAT_CPYTHON_TRICKS=0``); the extension keeps them off
    wherever they were not compiled in (free-threaded builds, untested
    versions). Read once, when the codec is set up.
    """
    value = config.get("cpython_tricks")
    return value is not False and str(value).strip() != "0"


def available(component: str) -> list[Name]:
    """The implementations ``component`` has here: ``"python"``, and ``"compiled"`` if it can run."""
    return ["compiled", "python"] if _COMPONENTS[component].built() else ["python"]


def active(component: str) -> Name:
    """The implementation ``component`` runs: ``"compiled"`` or ``"python"``."""
    return _COMPONENTS[component].current


def use(component: str, name: str) -> Name:
    """Switch ``component`` to ``name`` (``"compiled"``, ``"python"`` or ``"auto"``); returns the previous one.

    Raises
    ------
    CodecUnavailableError
        ``"compiled"`` was asked for but the compiled side cannot run here.
    ValueError
        An unknown name.
    """
    c = _COMPONENTS[component]
    choice = choose(name, built=c.built(), missing=c.missing(), what=c.name, env_var=c.env_var)
    c.namespace.update(c.compiled if choice == "compiled" else c.python)
    previous, c.current = c.current, choice
    return previous


def choose(
    name: str, *, built: bool, missing: BaseException | None, what: str, env_var: str
) -> Name:
    """The implementation ``name`` (``"compiled"``, ``"python"`` or ``"auto"``) resolves to.

    ``built``: whether the compiled module imported (``missing``: why not).

    Raises
    ------
    CodecUnavailableError
        ``"compiled"`` was asked for but the extension was not built.
    ValueError
        An unknown name.
    """
    choice = name.strip().lower()
    if choice == "auto":
        return "compiled" if built else "python"
    if choice == "compiled":
        if not built:
            raise CodecUnavailableError(
                f"the compiled {what} was not built ({missing}); reinstall shardcat where "
                f"a C compiler and the Python headers are present, or set {env_var}=python"
            )
        return "compiled"
    if choice == "python":
        return "python"
    raise ValueError(f"{env_var}={name!r}: choose auto, compiled or python")
