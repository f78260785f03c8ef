"""``-S KEY=VALUE``: fsspec storage options from the command line.

Values are strings: ``-S secret=0123`` is the string ``"0123"``, never the
number 123. Only options fsspec backends are known to take as another type
are converted (:data:`TYPED_OPTIONS`, by the option's last name, whatever the
protocol: s3fs, gcsfs, adlfs and the HTTP filesystem agree on these), and
``KEY:TYPE=VALUE`` asks for a type explicitly (``int``, ``float``, ``bool``,
``str``, ``json``). A config file's ``[storage_options]`` table is TOML, typed
already.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import typer

__all__ = ["STORAGE_OPTION_HELP", "TYPED_OPTIONS", "parse_storage_options"]

_HINT = "--storage-option"


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError("expected true or false")


_TYPES: dict[str, Callable[[str], Any]] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": _bool,
    "json": json.loads,
}

TYPED_OPTIONS: dict[str, str] = {
    # fsspec's AbstractFileSystem and its caches
    "skip_instance_cache": "bool",
    "use_listings_cache": "bool",
    "listings_expiry_time": "float",
    "max_paths": "int",
    "auto_mkdir": "bool",
    # s3fs
    "anon": "bool",
    "use_ssl": "bool",
    "requester_pays": "bool",
    "version_aware": "bool",
    "default_fill_cache": "bool",
    "default_cache_type": "str",
    "default_block_size": "int",
    "max_concurrency": "int",
    "fixed_upload_size": "bool",
    "cache_regions": "bool",
    # whole tables of options, given at once as JSON (or key by key: client_kwargs.region_name=...)
    "client_kwargs": "json",
    "config_kwargs": "json",
    "s3_additional_kwargs": "json",
    "connect_timeout": "float",
    "read_timeout": "float",
    "max_pool_connections": "int",
    # gcsfs, adlfs
    "consistency": "str",
    "requests_timeout": "float",
    "block_size": "int",
    "blocksize": "int",
    # the HTTP filesystem
    "simple_links": "bool",
    "same_scheme": "bool",
}
"""Options converted from text, by their last dotted name; every other option stays a string."""

STORAGE_OPTION_HELP = (
    "fsspec option KEY=VALUE (repeatable; dotted keys nest: client_kwargs.endpoint_url=URL). "
    "Values stay strings, except options known to be typed (anon, use_ssl, "
    "default_block_size, ...: true/false or numbers); KEY:TYPE=VALUE sets a type "
    "(int, float, bool, str, json)."
)


def parse_storage_options(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` or ``KEY:TYPE=VALUE`` pairs as nested storage options.

    Raises
    ------
    typer.BadParameter
        If a pair has no ``=``, names an unknown type, or its value is not of
        its type. The value is never quoted: it may be a secret.
    """
    options: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            # Not echoed: a malformed pair may still hold a secret.
            raise typer.BadParameter("expected KEY=VALUE", param_hint=_HINT)
        key, value = pair.split("=", 1)
        key, colon, kind = key.partition(":")
        if not key:
            raise typer.BadParameter("expected KEY=VALUE (the key is empty)", param_hint=_HINT)
        *parents, leaf = key.split(".")
        if not colon:
            kind = TYPED_OPTIONS.get(leaf, "str")
        convert = _TYPES.get(kind)
        if convert is None:
            raise typer.BadParameter(
                f"{key}: unknown type {kind!r}; use one of {', '.join(_TYPES)}", param_hint=_HINT
            )
        try:
            parsed = convert(value)
        except ValueError:
            raise typer.BadParameter(
                f"{key} takes a value of type {kind}; the one given is not", param_hint=_HINT
            ) from None
        node = options
        for p in parents:
            child = node.setdefault(p, {})
            if not isinstance(child, dict):
                raise typer.BadParameter(f"{key}: {p} is set to a value already", param_hint=_HINT)
            node = child
        node[leaf] = parsed
    return options
