"""``shardcat export``: a dataset version out as WebDataset tars.

The command only parses its options; the work is :func:`shardcat.export`.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Annotated

import typer

from .common import DestOption, ProgressOption, SchedulerOption, WorkersOption
from .jobs import dask_job
from .storage_options import parse_storage_options
from .version_cmds import VersionOption, parse_version
from .write_cmd import _check_size

__all__ = ["register"]


class ExportFormat(str, enum.Enum):
    webdataset = "webdataset"


def register(app: typer.Typer) -> None:
    app.command("export")(export)


def export(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Argument(help="The dataset to export.", metavar="DATASET")],
    dest_url: Annotated[
        str,
        typer.Argument(
            help="The folder the tars go to (s3://bucket/wds, a path); it must hold no tars.",
            metavar="DEST",
        ),
    ],
    format: Annotated[
        ExportFormat,
        typer.Option("--format", help="The tars' layout: webdataset (members key.entry)."),
    ] = ExportFormat.webdataset,
    version: VersionOption = None,
    shard_size: Annotated[
        str,
        typer.Option(
            help="The most bytes a tar holds; a sample is never split (one larger gets a tar "
            "of its own).",
            callback=_check_size,
            metavar="SIZE",
        ),
    ] = "1GB",
    name: Annotated[
        str | None,
        typer.Option(
            help="The tars' name, NAME-000000.tar (default: DATASET's, made a file name).",
            metavar="NAME",
        ),
    ] = None,
    register_as: Annotated[
        str | None,
        typer.Option(
            "--register",
            help="Also register the tars, indexed in place, as a new tar dataset NAME (one "
            "commit).",
            metavar="NAME",
        ),
    ] = None,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help="Replace an earlier export's tars in DEST (the files named NAME-NNNNNN.tar "
            "and .taridx; other files are kept).",
        ),
    ] = False,
    dest_option: DestOption = None,
    workers: WorkersOption = None,
    scheduler: SchedulerOption = None,
    progress: ProgressOption = True,
) -> None:
    """Write a dataset version as WebDataset tars in DEST, with a .taridx beside each.

    Samples go in read order, each entry a member named key.entry (decompressed:
    the bytes `get` returns), in tars NAME-000000.tar, ... of at most
    --shard-size. Keys and entry names that WebDataset would not read back as
    they are (a '.' after the key's last '/', an upper-case entry name, ...)
    are refused before anything is written. One Dask task writes each tar, published
    complete or not at all; a failed export removes the tars it wrote.
    """
    from ..orchestration.export import export as run

    dest_options = parse_storage_options(dest_option) if dest_option else None
    with dask_job(ctx, workers, scheduler, progress, "exporting", "tars") as job:
        summary = run(
            job.catalog,
            dataset,
            dest_url,
            format=format.value,
            version=parse_version(version),
            shard_size=shard_size,
            name=name,
            register=register_as,
            overwrite=overwrite,
            destination_options=dest_options,
            **job.args,
        )
    job.out.version_change(
        str(summary), {**dataclasses.asdict(summary), "mb_per_s": round(summary.mb_per_s, 3)}
    )
