"""Column groups: ``add-entries``, ``drop-group``, ``groups`` (docs/GROUPS.md).

The commands only parse their options: the job is :func:`shardcat.add_entries`,
the version :meth:`Catalog.drop_group`.
"""

from __future__ import annotations

import enum
import logging
from typing import Annotated

import typer

from .common import (
    ProgressOption,
    SchedulerOption,
    WorkersOption,
    dask_cluster,
    open_catalog,
    state_of,
)
from .write_cmd import (
    CompressionOption,
    KeyRule,
    KeyRuleOption,
    MessageOption,
    NoExtEntryOption,
    ShardSizeOption,
    SkipUnmatchedOption,
    file_source,
)

__all__ = ["register"]

DatasetArg = Annotated[str, typer.Argument(help="The dataset's name.", metavar="DATASET")]
GroupOption = Annotated[
    str, typer.Option("--group", "-g", help="The column group's name.", metavar="NAME")
]


class GroupMode(str, enum.Enum):
    append = "append"
    replace_them = "replace"  # not `replace`: a str method's name


class OnMissing(str, enum.Enum):
    error = "error"
    skip = "skip"


def register(app: typer.Typer) -> None:
    app.command("add-entries")(add_entries)
    app.command("drop-group")(drop_group)
    app.command("groups")(groups)


def add_entries(
    ctx: typer.Context,
    src: Annotated[
        str,
        typer.Argument(
            help="Files to pack, named KEY.ENTRY after the dataset's keys: a folder, any fsspec "
            "URL, a glob or a brace pattern.",
            metavar="SRC",
        ),
    ],
    dataset: DatasetArg,
    group: GroupOption,
    mode: Annotated[
        GroupMode,
        typer.Option(
            help="append: a new group, or keys new to it; replace: replace the group's entries "
            "of these keys (fix part of a group)."
        ),
    ] = GroupMode.append,
    on_missing: Annotated[
        OnMissing,
        typer.Option(
            help="A key the dataset does not have: error (naming some), or skip it (counted)."
        ),
    ] = OnMissing.error,
    replace_entries: Annotated[
        bool,
        typer.Option(
            "--replace-entries",
            help="An entry name the samples have already: the new entry replaces it from the "
            "new version on (else an error).",
        ),
    ] = False,
    shard_size: ShardSizeOption = "256MB",
    compression: CompressionOption = None,
    message: MessageOption = None,
    key_rule: KeyRuleOption = KeyRule.first_dot,
    no_ext_entry: NoExtEntryOption = None,
    skip_unmatched: SkipUnmatchedOption = False,
    workers: WorkersOption = None,
    scheduler: SchedulerOption = None,
    progress: ProgressOption = True,
) -> None:
    """Add entries to a dataset's samples as a column group, without rewriting its shards.

    `captions/a/img1.txt` adds entry `txt` to sample `a/img1`. The Dask
    workers write shards holding only the new entries into the dataset's
    folder; the job commits them as one version. `shardcat get` then returns
    each sample's entries and its groups'; older versions read what they read.
    """
    from ..orchestration.files import list_source
    from ..orchestration.groups import add_entries as add

    cluster = dask_cluster(workers, scheduler)
    state = state_of(ctx)
    if state.verbose < 2:  # Dask's INFO lines (scheduler, nanny) bury the progress bar
        import distributed  # noqa: F401  (importing it sets its loggers' levels; override after)

        logging.getLogger("distributed").setLevel(logging.WARNING)
    source = file_source(state, src, key_rule, no_ext_entry, skip_unmatched)
    listing = list_source(source)  # an empty or unmatched source fails before a cluster starts
    out = state.out
    with open_catalog(state) as cat, out.write_progress(progress) as bar:
        summary = add(
            listing,
            catalog=cat,
            dataset=dataset,
            group=group,
            mode="replace" if mode is GroupMode.replace_them else "append",
            on_missing="skip" if on_missing is OnMissing.skip else "error",
            replace_entries=replace_entries,
            shard_size=shard_size,
            compression=compression,
            message=message,
            storage_options=state.storage_options,
            client=cluster,
            progress=bar,
        )
    out.write_summary(summary)


def drop_group(
    ctx: typer.Context,
    dataset: DatasetArg,
    group: Annotated[str, typer.Argument(help="The group to drop.", metavar="GROUP")],
    message: MessageOption = None,
) -> None:
    """Make a new version without a column group (older versions keep reading it)."""
    state = state_of(ctx)
    with open_catalog(state) as cat:
        number = cat.drop_group(dataset, group, message=message)
    state.out.version_change(
        f"{dataset}: version {number} drops group {group!r}",
        {"dataset": dataset, "version": number, "dropped_group": group},
    )


def groups(ctx: typer.Context, dataset: DatasetArg) -> None:
    """List a dataset's column groups: when each was added (and dropped), its live records."""
    state = state_of(ctx)
    with open_catalog(state) as cat:
        found = cat.groups(dataset)
    state.out.groups(dataset, found)
