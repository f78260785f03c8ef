"""Help text that names values the way a user types them: ``DATASET``, ``URL...``, ``-S KEY=VALUE``.

typer (0.2x) labels every parameter with its Python type (``<str>``,
``<bool>``, ``<list[str]>``) and wraps required arguments in braces
(``{DATASET}``). The commands give each value a metavar; these subclasses
show it, show nothing for flags, and write usage lines as ``DATASET [KEY]``.
The parameters typer builds are switched to them in place
(:func:`clean_params`): typer offers no hook to choose its parameter classes.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperArgument, TyperOption

__all__ = ["clean_params"]

_PLAIN = {
    "str": "TEXT",
    "int": "N",
    "int range": "N",
    "float": "NUMBER",
    "float range": "NUMBER",
    "Path": "PATH",
    "bool": "BOOL",
}


def _type_name(param: Any, ctx: Any) -> str:
    """A metavar for a value that has none: TEXT, N, NUMBER, PATH, or the choices ``a|b``."""
    shown = str(param.display_type(ctx)).strip("<>")
    if shown.startswith("list[") and shown.endswith("]"):
        shown = shown[5:-1]
    return _PLAIN.get(shown, shown)


class _Argument(TyperArgument):
    def display_type_rich(self, ctx: Any) -> str | None:
        return None  # the name column shows the metavar already

    def _usage_display_name(self) -> str:
        name = self.metavar or self.name.upper()
        if self.nargs != 1:
            name += "..."
        return name if self.required else f"[{name}]"


class _Option(TyperOption):
    def display_type_rich(self, ctx: Any) -> str | None:
        if self.is_flag or self.count:
            return None  # a flag takes no value: nothing to name
        name = self.metavar or _type_name(self, ctx)
        return f"{name}..." if self.nargs != 1 else name


def clean_params(params: list[Any]) -> list[Any]:
    """Switch typer's parameters to the classes above (same state, different help)."""
    for p in params:
        if type(p) is TyperArgument:
            p.__class__ = _Argument
        elif type(p) is TyperOption:
            p.__class__ = _Option
    return params
