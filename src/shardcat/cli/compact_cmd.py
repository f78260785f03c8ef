"""``shardcat compact``: rewrite a dataset's mostly-dead shards into new ones, as one version.

The command only parses its options; the work is :func:`shardcat.compact`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from .common import ProgressOption, SchedulerOption, WorkersOption
from .jobs import dask_job

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    app.command("compact")(compact)


def compact(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Argument(help="The dataset to compact.", metavar="DATASET")],
    min_live: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Compact shards whose live fraction (records the latest version sees / "
            "records in the file) is below this.",
        ),
    ] = 0.5,
    shard_size: Annotated[
        str,
        typer.Option(help="Size of the new shards and live bytes per task.", metavar="SIZE"),
    ] = "256MB",
    message: Annotated[
        str | None,
        typer.Option("--message", "-m", help="Recorded with the new version (shardcat log)."),
    ] = None,
    fold_groups: Annotated[
        bool,
        typer.Option(
            "--fold-groups",
            help="Fold every live column group into the base shards (the same version drops "
            "the groups; older versions keep reading them until expire and gc).",
        ),
    ] = False,
    fold_group: Annotated[
        list[str] | None,
        typer.Option(
            "--fold-group",
            help="Fold only this column group into the base shards (repeatable).",
            metavar="NAME",
        ),
    ] = None,
    workers: WorkersOption = None,
    scheduler: SchedulerOption = None,
    progress: ProgressOption = True,
) -> None:
    """Rewrite the live records of mostly-dead shards into new shards, committed as one version.

    Lookups give the same bytes before and after; older versions still read
    the old shards. Tar shards are never compacted. The old shards' bytes are
    reclaimed by expire and gc once no kept version reads them. With
    --fold-groups (or --fold-group NAME), column groups are folded into the
    base shards: lookups at the new version give the same samples, from the
    base records alone.
    """
    from ..orchestration.compact import compact as compact_dataset

    if fold_groups and fold_group:
        raise typer.BadParameter(
            "--fold-groups folds every group: leave it out to fold only the --fold-group ones",
            param_hint="--fold-groups",
        )
    fold: bool | list[str] = list(fold_group) if fold_group else fold_groups

    with dask_job(ctx, workers, scheduler, progress, "compacting", "groups") as job:
        summary = compact_dataset(
            job.catalog,
            dataset,
            min_live=min_live,
            shard_size=shard_size,
            message=message,
            fold_groups=fold,
            **job.args,
        )
    job.out.compact_summary(summary)
