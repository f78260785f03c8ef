"""``shardcat index-tar``, ``index-files``, ``index-mds``, ``index-litdata`` and ``taridx``.

Data indexed in place. The commands only parse: indexing is
:func:`shardcat.index_tar`, :func:`shardcat.index_files` and
:func:`shardcat.index_directory`, the TARIDX
conversions are :mod:`shardcat.orchestration.taridx_io`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Annotated

import typer

from .common import (
    FieldEntryOption,
    FieldOption,
    ProgressOption,
    SchedulerOption,
    WorkersOption,
    open_catalog,
    parse_fields,
    state_of,
)
from .global_options import GlobalOptionsGroup, use_global_options
from .jobs import dask_job
from .write_cmd import KeyRule, KeyRuleOption

__all__ = ["register"]

taridx_app = typer.Typer(
    name="taridx",
    help="Export a tar dataset's index as a .taridx file (TARIDX 1.0), or import one.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=GlobalOptionsGroup,
)


class OnError(str, enum.Enum):
    fail = "fail"
    skip = "skip"


def register(app: typer.Typer) -> None:
    app.command("index-tar")(index_tar)
    app.command("index-files")(index_files)
    app.command("index-mds")(index_mds)
    app.command("index-litdata")(index_litdata)
    taridx_app.command("export")(export)
    taridx_app.command("import")(import_)
    use_global_options(taridx_app)


def index_tar(
    ctx: typer.Context,
    pattern: Annotated[
        list[str],
        typer.Argument(
            help="Tar URLs or patterns: braces (train-{000000..000099}.tar) and globs (*.tar).",
            metavar="PATTERN...",
        ),
    ],
    dataset: Annotated[
        str, typer.Option("--dataset", "-d", help="The dataset's name.", metavar="NAME")
    ],
    on_error: Annotated[
        OnError,
        typer.Option(help="fail: a bad tar fails the job; skip: report it and leave it out."),
    ] = OnError.fail,
    field: FieldOption = None,
    field_entry: FieldEntryOption = "json",
    workers: WorkersOption = None,
    scheduler: SchedulerOption = None,
    progress: ProgressOption = True,
) -> None:
    """Index WebDataset tars in place: every sample gets a key lookup, CRC-checked.

    Each tar is read once as a stream by one Dask task (no download, no
    request per member); the whole job commits at once. The tars are never
    changed; `delete` leaves them unless given --delete-tars. With --field
    label:int, each task then reads the samples' JSON entries (only those
    members) and stores the field, so `where="label = 3"` works at once.
    """
    from ..orchestration import index_tar as run

    fields = parse_fields(field)
    with dask_job(ctx, workers, scheduler, progress, "indexing", "tars", create=True) as job:
        summary = run(
            pattern,
            catalog=job.catalog,
            dataset=dataset,
            on_error=on_error.value,
            fields=fields,
            fields_entry=field_entry,
            **job.args,
        )
    job.out.tar_indexed(summary)


def index_files(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Argument(
            help="A folder, URL, glob (s3://raw/*/img*.jpg) or brace pattern (part-{000..009}/).",
            metavar="SRC",
        ),
    ],
    dataset: Annotated[str, typer.Argument(help="The dataset's name.", metavar="DATASET")],
    on_error: Annotated[
        OnError,
        typer.Option(
            help="fail: an unreadable file fails the job; skip: report it and leave it out (its "
            "sample keeps its other files)."
        ),
    ] = OnError.fail,
    key_rule: KeyRuleOption = KeyRule.first_dot,
    skip_unmatched: Annotated[
        bool,
        typer.Option("--skip-unmatched", help="Skip files with no extension instead of failing."),
    ] = False,
    field: FieldOption = None,
    field_entry: FieldEntryOption = "json",
    workers: WorkersOption = None,
    scheduler: SchedulerOption = None,
    progress: ProgressOption = True,
) -> None:
    """Index a folder of files in place: samples by key (x.jpg + x.json), each file CRC-checked.

    Files are grouped into samples by the key rule of `shardcat write SRC`
    and registered where they are: nothing is copied, and `gc` and `delete`
    never delete them. Each Dask task reads a group of files once (their
    CRC32C) and the job commits at once; the dataset's new version is the
    folder as read, so running it again picks up added, removed and changed
    files while older versions still read theirs.
    """
    from ..orchestration import index_files as run

    fields = parse_fields(field)
    with dask_job(ctx, workers, scheduler, progress, "indexing", "file groups", create=True) as job:
        summary = run(
            source,
            catalog=job.catalog,
            dataset=dataset,
            key_rule=key_rule.value,
            skip_unmatched=skip_unmatched,
            on_error=on_error.value,
            fields=fields,
            fields_entry=field_entry,
            **job.args,
        )
    job.out.tar_indexed(summary)


DirectoryArgument = Annotated[
    str,
    typer.Argument(help="The directory holding index.json: a path or URL.", metavar="SRC"),
]
KeyColumnOption = Annotated[
    str | None,
    typer.Option(
        "--key-column",
        help="The column whose values are the keys (text or integer); default: the sample index.",
        metavar="COLUMN",
    ),
]
FileOnError = Annotated[
    OnError,
    typer.Option(help="fail: a damaged file fails the job; skip: report it and leave it out."),
]


def _directory_command(kind: str, doc: str) -> Callable[..., None]:
    """The command that indexes a directory of ``kind`` (``index-mds``, ``index-litdata``)."""

    def command(
        ctx: typer.Context,
        source: DirectoryArgument,
        dataset: Annotated[str, typer.Argument(help="The dataset's name.", metavar="DATASET")],
        key_column: KeyColumnOption = None,
        on_error: FileOnError = OnError.fail,
        workers: WorkersOption = None,
        scheduler: SchedulerOption = None,
        progress: ProgressOption = True,
    ) -> None:
        _index_directory(
            ctx, kind, source, dataset, key_column, on_error, workers, scheduler, progress
        )

    command.__doc__ = doc
    return command


index_mds = _directory_command(
    "mds",
    """Index an MDS directory (MosaicML Streaming) in place: a key lookup per sample, CRC-checked.

    Each shard is read once by one Dask task, which computes every column's
    CRC32C; the job commits at once. Each column becomes an entry of its
    name (the --key-column one excepted). Compressed shards are refused. The
    files are never changed, and `gc` and `delete` never delete them.
    """,
)
index_litdata = _directory_command(
    "litdata",
    """Index a LitData optimized directory in place: a key lookup per sample, CRC-checked.

    As index-mds: each chunk one Dask task, each leaf of a sample an entry
    named by its path (image, meta.a). Compressed or encrypted chunks are
    refused. The files are never changed, and `gc` and `delete` never
    delete them.
    """,
)


def _index_directory(
    ctx: typer.Context,
    kind: str,
    source: str,
    dataset: str,
    key_column: str | None,
    on_error: OnError,
    workers: int | None,
    scheduler: str | None,
    progress: bool,
) -> None:
    from ..orchestration import index_directory

    with dask_job(ctx, workers, scheduler, progress, "indexing", "files", create=True) as job:
        summary = index_directory(
            source,
            catalog=job.catalog,
            dataset=dataset,
            format="mds" if kind == "mds" else "litdata",
            key_column=key_column,
            on_error=on_error.value,
            **job.args,
        )
    job.out.tar_indexed(summary)


def export(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Argument(help="A tar dataset's name.", metavar="DATASET")],
    out_path: Annotated[str, typer.Argument(help="The .taridx file to write.", metavar="OUT")],
) -> None:
    """Write a tar dataset's index as a TARIDX 1.0 file (fid = the tar's place in `ls`).

    The file is the one iTar writes: a row per tar header, samples named by
    their stem (the name after the last '/', up to the first dot), so
    train/0007 and val/0007 are one stem there; the command says how many
    samples share a stem.
    """
    from ..orchestration.taridx_io import export_taridx

    state = state_of(ctx)
    with open_catalog(state) as cat:
        done = export_taridx(cat, dataset, out_path, storage_options=state.storage_options)
    state.out.taridx_done(
        "exported",
        out_path,
        dataset,
        len(done.tars),
        len(done.index.rows),
        shared=(done.shared_samples, done.shared_stems),
    )


def import_(
    ctx: typer.Context,
    in_path: Annotated[str, typer.Argument(help="The .taridx file to read.", metavar="IN")],
    tars: Annotated[
        str,
        typer.Option(
            "--tars",
            help="The tars it indexes, in fid order: a brace pattern or glob.",
            metavar="URL_PATTERN",
        ),
    ],
    dataset: Annotated[
        str, typer.Option("--dataset", "-d", help="The dataset's name.", metavar="NAME")
    ],
    field: FieldOption = None,
    field_entry: FieldEntryOption = "json",
    workers: WorkersOption = None,
    scheduler: SchedulerOption = None,
    progress: ProgressOption = True,
) -> None:
    """Register the tars a .taridx file indexes; every tar must match its rows.

    TARIDX holds key hashes, not keys, and no CRCs: each tar is scanned once
    (streaming) for its keys and CRCs, and checked against the index's rows.
    """
    from ..orchestration.taridx_io import import_taridx

    fields = parse_fields(field)
    with dask_job(ctx, workers, scheduler, progress, "checking", "tars", create=True) as job:
        summary = import_taridx(
            job.catalog,
            in_path,
            tars,
            dataset=dataset,
            fields=fields,
            fields_entry=field_entry,
            **job.args,
        )
    job.out.taridx_done("imported", in_path, dataset, len(summary.tars), summary.records)
