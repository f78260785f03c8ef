"""``shardcat copy``: copy or move a dataset to another folder, bucket or catalog.

The command only parses its options; the work is :func:`shardcat.copy_dataset`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from .common import DestOption, KeyMode, ProgressOption, SchedulerOption, WorkersOption
from .jobs import dask_job
from .storage_options import parse_storage_options

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    app.command("copy")(copy)


def copy(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Argument(help="The dataset to copy.", metavar="DATASET")],
    dest_url: Annotated[
        str,
        typer.Argument(
            help="The copy's folder (s3://bucket/x, a path): empty, or holding only the "
            "shards of an interrupted run of this copy.",
            metavar="DEST_URL",
        ),
    ],
    to_catalog: Annotated[
        str | None,
        typer.Option(
            help="Register the copy in this catalog (default: the same one).", metavar="URL"
        ),
    ] = None,
    as_name: Annotated[
        str | None,
        typer.Option(
            "--as",
            help="The copy's name (default: DATASET's; needed within one catalog).",
            metavar="NAME",
        ),
    ] = None,
    move: Annotated[
        bool,
        typer.Option(
            "--move",
            help="Move instead: the dataset is repointed at the copies in one commit, then "
            "its old shards are removed.",
        ),
    ] = False,
    keys: Annotated[
        KeyMode | None,
        typer.Option(
            "--keys",
            help="What the copy's catalog keeps of each key (as `shardcat write --keys`): text "
            "in key order (the default), unsorted (no key-order index) or hash only; a copy is "
            "how a dataset changes its key mode.",
        ),
    ] = None,
    dest_option: DestOption = None,
    workers: WorkersOption = None,
    scheduler: SchedulerOption = None,
    progress: ProgressOption = True,
) -> None:
    """Copy a dataset's committed shards to DEST_URL and register the copy in one commit.

    One Dask task per shard streams it to DEST_URL and reads it back, checking
    every CRC against the catalog; the copy becomes visible in one commit, or
    not at all. The source is never changed. Rerun an interrupted copy with
    the same arguments: shards already copied and verified are skipped.
    """
    from ..orchestration.copy import copy_dataset

    dest_options = parse_storage_options(dest_option) if dest_option else None
    doing = "moving" if move else "copying"
    with dask_job(ctx, workers, scheduler, progress, doing, "shards") as job:
        summary = copy_dataset(
            job.catalog,
            dataset,
            dest_url,
            to_catalog=to_catalog,
            name=as_name,
            move=move,
            destination_options=dest_options,
            keys=keys.value if keys is not None else None,
            **job.args,
        )
    job.out.copy_summary(summary)
