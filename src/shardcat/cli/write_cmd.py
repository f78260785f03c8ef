"""``shardcat write``: pack files (a folder, URL or glob) into shards, one sample per key.

The command only parses its options: listing, key rule, planning and the
workers' reads are :func:`shardcat.from_files` and :func:`shardcat.write`.
"""

from __future__ import annotations

import enum
import logging
from typing import TYPE_CHECKING, Annotated

import typer

from .common import (
    FieldEntryOption,
    FieldOption,
    KeyMode,
    ProgressOption,
    SchedulerOption,
    State,
    WorkersOption,
    dask_cluster,
    open_catalog,
    parse_fields,
    state_of,
)
from .jobs import quiet_dask

if TYPE_CHECKING:
    from ..orchestration.files import FileSource

__all__ = ["register"]

log = logging.getLogger(__name__)


class Mode(str, enum.Enum):
    create = "create"
    append = "append"
    overwrite = "overwrite"


class OnDuplicate(str, enum.Enum):
    error = "error"
    replace_it = "replace"  # not `replace`: a str method's name
    skip = "skip"


class KeyRule(str, enum.Enum):
    first_dot = "first-dot"
    last_dot = "last-dot"


KeyRuleOption = Annotated[
    KeyRule,
    typer.Option(
        help="Where a file name splits into key and entry: at its first dot (WebDataset: "
        "x.seg.png -> key x, entry seg.png) or its last dot (pip-1.2.whl -> pip-1.2, whl)."
    ),
]
NoExtEntryOption = Annotated[
    str | None,
    typer.Option(
        help="Pack files with no extension (README) as this entry of a key that is their "
        "whole path, instead of failing.",
        metavar="NAME",
    ),
]
SkipUnmatchedOption = Annotated[
    bool,
    typer.Option(
        "--skip-unmatched",
        help="Skip files with no extension instead of failing; the summary counts them.",
    ),
]


def register(app: typer.Typer) -> None:
    app.command("write")(write)


def _check_size(value: str) -> str:
    from .._units import parse_size

    try:
        parse_size(value)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    return value


def _check_codec(value: str | None) -> str | None:
    from ..format import Codec

    if value is not None:
        try:
            Codec.parse(value)
        except ValueError as e:
            raise typer.BadParameter(str(e)) from None
    return value


ShardSizeOption = Annotated[
    str,
    typer.Option(
        help="Target shard size: files are planned into shards of about this size.",
        callback=_check_size,
        metavar="SIZE",
    ),
]
CompressionOption = Annotated[
    str | None,
    typer.Option(
        help="Compress entries: zstd or lz4 (default: none).",
        callback=_check_codec,
        metavar="CODEC",
    ),
]
MessageOption = Annotated[
    str | None,
    typer.Option("--message", "-m", help="Recorded with the new version (shardcat log)."),
]


def write(
    ctx: typer.Context,
    src: Annotated[
        str,
        typer.Argument(
            help="Files to pack: a folder, any fsspec URL (s3://raw/images/), a glob "
            "(s3://raw/*/img*.jpg) or a brace pattern (s3://raw/part-{000..099}/).",
            metavar="SRC",
        ),
    ],
    url: Annotated[
        str, typer.Argument(help="Folder or URL the shards go to (s3://bucket/x).", metavar="URL")
    ],
    dataset: Annotated[
        str, typer.Option("--dataset", "-d", help="The dataset's name.", metavar="NAME")
    ],
    shard_size: ShardSizeOption = "256MB",
    compression: CompressionOption = None,
    mode: Annotated[
        Mode,
        typer.Option(
            help="create: new dataset; append: add keys to an existing dataset, in its own "
            "folder URL; overwrite: replace its records."
        ),
    ] = Mode.create,
    on_duplicate: Annotated[
        OnDuplicate,
        typer.Option(
            help="--mode append, a key the dataset has: error, replace it (new version points at "
            "the new sample) or skip the new sample."
        ),
    ] = OnDuplicate.error,
    message: MessageOption = None,
    key_rule: KeyRuleOption = KeyRule.first_dot,
    no_ext_entry: NoExtEntryOption = None,
    skip_unmatched: SkipUnmatchedOption = False,
    field: FieldOption = None,
    field_entry: FieldEntryOption = "json",
    workers: WorkersOption = None,
    scheduler: SchedulerOption = None,
    progress: ProgressOption = True,
    job_name: Annotated[
        str | None,
        typer.Option(
            help="Name the job. Rerun with the same name after the client died: the job "
            "resumes, writing only the shards it had not finished.",
            metavar="NAME",
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Resume the dataset's newest unfinished job into URL (same --mode), if any.",
        ),
    ] = False,
    allow_changed_inputs: Annotated[
        bool,
        typer.Option(
            "--allow-changed-inputs",
            help="Resume even if files under SRC changed since the job began (paths, sizes, "
            "modification times): the shards it finished keep the old files' data.",
        ),
    ] = False,
    keys: Annotated[
        KeyMode | None,
        typer.Option(
            "--keys",
            help="What a new dataset's catalog keeps of each key: text (and its hash) in key "
            "order; unsorted: text and hash, no key-order index (fewer bytes per key; no "
            "`keys` listing or --prefix); or hash only (fewer still; lookups compare the key "
            "the shard holds; no where= on keys either). Default: text, or the existing "
            "dataset's.",
        ),
    ] = None,
) -> None:
    """Pack files into shards: `a/img1.jpg` + `a/img1.cls` become sample `a/img1` (jpg, cls).

    A sample's key is the file's path under SRC up to the first dot of its
    name (--key-rule last-dot: the last dot); the rest of the name is the
    entry (`x.seg.png` -> entry `seg.png`). A file with no extension fails
    the command, naming it, unless --no-ext-entry or --skip-unmatched says
    what to do; two files with the same key and entry fail it too, and so
    does a file readers would not decode (an empty or broken .json, a .txt
    that is not UTF-8, a bad .npy), naming it, before anything is
    committed. Hidden files (names starting with '.') are never packed and
    are counted. An empty source is an error. SRC is read with the same -S storage options
    as URL.

    The client only lists the files and plans shards of about --shard-size
    from their sizes; the Dask workers read the files themselves and write
    the shards in parallel. Every record is registered in the catalog,
    visible once the whole job commits. A job whose client was killed stays
    unfinished: rerun the command with its --job-name (or --resume) and only
    what it had not written is written. A resume is refused if the files under
    SRC changed since the job began (--allow-changed-inputs overrides).
    --field label:int stores each sample's `label` from its JSON entry
    (`a/img1.json`; --field-entry names another) in the catalog with its
    shard, a column of where= filters once the job commits.
    """
    from ..orchestration.files import list_source
    from ..orchestration.write import write as write_dataset

    fields = parse_fields(field)
    cluster = dask_cluster(workers, scheduler)
    state = state_of(ctx)
    quiet_dask(state.verbose)
    source = file_source(state, src, key_rule, no_ext_entry, skip_unmatched)
    # Listed before a cluster starts: an empty or unmatched source fails at once.
    listing = list_source(source)
    out = state.out
    with (
        open_catalog(state, create=True) as cat,
        out.write_progress(progress) as bar,
    ):
        summary = write_dataset(
            listing,
            url,
            catalog=cat,
            dataset=dataset,
            shard_size=shard_size,
            compression=compression,
            mode=mode.value,
            on_duplicate=on_duplicate.value,
            message=message,
            storage_options=state.storage_options,
            client=cluster,
            progress=bar,
            job_name=job_name,
            resume=resume,
            allow_changed_inputs=allow_changed_inputs,
            fields=fields,
            json_entry=field_entry,
            keys=None if keys is None else keys.value,
        )
    out.write_summary(summary)


def file_source(
    state: State, src: str, key_rule: KeyRule, no_ext_entry: str | None, skip_unmatched: bool
) -> FileSource:
    """SRC as files to pack, with the command's --key-rule, --no-ext-entry, --skip-unmatched.

    Raises
    ------
    typer.BadParameter
        Both --no-ext-entry and --skip-unmatched, or an entry name that is not one.
    """
    from ..orchestration import from_files

    if no_ext_entry is not None and skip_unmatched:
        raise typer.BadParameter(
            "give --no-ext-entry or --skip-unmatched, not both", param_hint="--skip-unmatched"
        )
    try:
        return from_files(
            src,
            storage_options=state.storage_options,
            key_rule=key_rule.value,
            no_ext_entry=no_ext_entry,
            skip_unmatched=skip_unmatched,
        )
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--no-ext-entry") from None
