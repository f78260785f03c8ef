"""Commands on dataset versions: log, tag, untag, diff, delete-keys, expire (docs/LIFECYCLE.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from .._units import count_of
from .common import open_catalog, parse_duration, state_of

__all__ = ["VersionOption", "as_version", "parse_version", "register"]

VersionOption = Annotated[
    str | None,
    typer.Option(
        "--version",
        help="Read this kept version (a number or a tag); default the latest.",
        metavar="VERSION",
    ),
]


def as_version(value: str) -> int | str:
    """A version given on the command line: a number, or else a tag."""
    return int(value) if value.isdigit() else value


def parse_version(value: str | None) -> int | str | None:
    """An optional ``--version``: None (the latest), a number or a tag."""
    return None if value is None else as_version(value)


def register(app: typer.Typer) -> None:
    app.command("log")(log)
    app.command("tag")(tag)
    app.command("untag")(untag)
    app.command("diff")(diff)
    app.command("delete-keys")(delete_keys)
    app.command("expire")(expire)


DatasetArg = Annotated[str, typer.Argument(help="The dataset's name.", metavar="DATASET")]


def log(ctx: typer.Context, dataset: DatasetArg) -> None:
    """List a dataset's kept versions, newest first: operation, counts, tags, message."""
    state = state_of(ctx)
    with open_catalog(state) as cat:
        versions = cat.log(dataset)
    state.out.version_log(dataset, versions)


def tag(
    ctx: typer.Context,
    dataset: DatasetArg,
    version: Annotated[str, typer.Argument(help="A kept version (or a tag).", metavar="VERSION")],
    name: Annotated[str, typer.Argument(help="The tag (not a number).", metavar="NAME")],
    move: Annotated[
        bool, typer.Option("--move", help="Move the tag if it names another version.")
    ] = False,
) -> None:
    """Name a version; a tagged version is never expired."""
    state = state_of(ctx)
    with open_catalog(state) as cat:
        number = cat.tag(dataset, as_version(version), name, move=move)
    state.out.version_change(
        f"{dataset}: tag {name!r} -> version {number}",
        {"dataset": dataset, "tag": name, "version": number},
    )


def untag(
    ctx: typer.Context,
    dataset: DatasetArg,
    name: Annotated[str, typer.Argument(help="The tag to remove.", metavar="NAME")],
) -> None:
    """Remove a tag (the version may then expire)."""
    state = state_of(ctx)
    with open_catalog(state) as cat:
        number = cat.untag(dataset, name)
    state.out.version_change(
        f"{dataset}: removed tag {name!r} (was version {number})",
        {"dataset": dataset, "tag": name, "version": number, "removed": True},
    )


def diff(
    ctx: typer.Context,
    dataset: DatasetArg,
    old: Annotated[str, typer.Argument(help="The older version (or tag).", metavar="V1")],
    new: Annotated[str, typer.Argument(help="The newer version (or tag).", metavar="V2")],
    keys: Annotated[bool, typer.Option("--keys", help="List the keys, not only counts.")] = False,
) -> None:
    """Keys added, removed and replaced from version V1 to V2."""
    state = state_of(ctx)
    with open_catalog(state) as cat:
        result = cat.diff(dataset, as_version(old), as_version(new), keys=keys)
    state.out.version_diff(result)


def delete_keys(
    ctx: typer.Context,
    dataset: DatasetArg,
    keys_from: Annotated[
        str,
        typer.Option(
            "--keys-from", help="Keys to delete, one a line (- for stdin).", metavar="FILE"
        ),
    ],
    missing_ok: Annotated[
        bool, typer.Option("--missing-ok", help="Ignore keys the dataset does not have.")
    ] = False,
    message: Annotated[
        str | None, typer.Option("--message", "-m", help="Recorded with the new version.")
    ] = None,
) -> None:
    """Make a new version without these keys (no shard is rewritten; older versions keep them)."""
    text = sys.stdin.read() if keys_from == "-" else Path(keys_from).read_text(encoding="utf-8")
    wanted = [line.rstrip("\r") for line in text.split("\n") if line.strip()]
    state = state_of(ctx)
    with open_catalog(state) as cat:
        number = cat.delete_keys(dataset, wanted, missing_ok=missing_ok, message=message)
        removed = cat.log(dataset)[0].records_removed
    state.out.version_change(
        f"{dataset}: version {number} deletes {count_of(removed, 'key')}",
        {"dataset": dataset, "version": number, "deleted": removed, "asked": len(wanted)},
    )


def expire(
    ctx: typer.Context,
    dataset: DatasetArg,
    keep_last: Annotated[
        int, typer.Option("--keep-last", help="Keep this many newest versions (at least 1).", min=1)
    ],
    older_than: Annotated[
        str | None,
        typer.Option(help="Only expire versions older than this (30d, 12h).", metavar="DURATION"),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", "-n", help="Only report what would expire.")
    ] = False,
) -> None:
    """Drop old untagged versions (never the latest); then `shardcat gc` reclaims their shards."""
    state = state_of(ctx)
    age = None if older_than is None else parse_duration(older_than)
    with open_catalog(state) as cat:
        result = cat.expire(dataset, keep_last=keep_last, older_than=age, dry_run=dry_run)
    state.out.expired(result, dry_run=dry_run)
