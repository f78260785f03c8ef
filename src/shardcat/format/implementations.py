"""Choosing between a compiled module and its pure-Python reference (record codec, tar walker)."""

from __future__ import annotations

from typing import Literal

from ..errors import CodecUnavailableError

__all__ = ["Name", "choose"]

Name = Literal["compiled", "python"]


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
