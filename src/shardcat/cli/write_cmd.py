"""``shardcat write``: pack a folder of files into shards, one sample per file stem."""

from __future__ import annotations

import contextlib
import enum
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import DuplicateKeyError
from .common import open_catalog, state_of

__all__ = ["group_samples", "iter_files", "register", "sample_parts"]

log = logging.getLogger(__name__)


class Mode(str, enum.Enum):
    create = "create"
    append = "append"
    overwrite = "overwrite"


def register(app: typer.Typer) -> None:
    app.command("write")(write)


def sample_parts(relpath: str) -> tuple[str, str] | None:
    """``a/b/img001.seg.png`` → (``a/b/img001``, ``seg.png``): the key ends at the basename's first dot.

    Files without a dot in their name (no entry name) give ``None``.
    """
    folder, _, name = relpath.rpartition("/")
    stem, dot, entry = name.partition(".")
    if not dot or not stem or not entry:
        return None
    return (f"{folder}/{stem}" if folder else stem), entry


def iter_files(root: Path) -> Iterator[str]:
    """Relative ``/``-separated paths of the non-hidden files under ``root``.

    Each folder's files come sorted, before its sub-folders: the files of one
    sample (same folder, same stem) are therefore adjacent, which is what
    lets :func:`group_samples` stream.
    """

    def fail(e: OSError) -> None:
        raise e

    for folder, dirs, files in os.walk(root, onerror=fail):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        rel = os.path.relpath(folder, root)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        for name in sorted(files):
            if not name.startswith("."):
                yield prefix + name


def group_samples(root: Path, relpaths: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Samples ``{"__key__": key, entry: bytes, ...}``, reading each file only when its sample is due.

    ``relpaths`` must list a sample's files together (as :func:`iter_files`
    does); files without an entry name are skipped with a warning.

    Raises
    ------
    DuplicateKeyError
        If two files map to the same key and entry, or a key's files are not together.
    """
    done_here: set[str] = set()  # keys finished in the current folder (bounded memory)
    folder: str | None = None
    key: str | None = None
    files: dict[str, str] = {}

    def flush() -> dict[str, Any]:
        sample: dict[str, Any] = {"__key__": key}
        for entry, rel in files.items():
            sample[entry] = (root / rel).read_bytes()
        return sample

    for rel in relpaths:
        parts = sample_parts(rel)
        if parts is None:
            log.warning("skipping %s: no extension, so no entry name", rel)
            continue
        k, entry = parts
        if k != key:
            if key is not None:
                yield flush()
                done_here.add(key)
            if k.rpartition("/")[0] != folder:
                folder = k.rpartition("/")[0]
                done_here.clear()
            if k in done_here:
                raise DuplicateKeyError(f"files of sample {k!r} are not listed together", keys=[k])
            key, files = k, {}
        if entry in files:
            raise DuplicateKeyError(
                f"{files[entry]} and {rel} both map to key {k!r}, entry {entry!r}", keys=[k]
            )
        files[entry] = rel
    if key is not None:
        yield flush()


@contextlib.contextmanager
def _client(workers: int | None, scheduler: str | None, url: str) -> Iterator[Any]:
    """A Dask client: the given scheduler's, a local cluster of ``workers`` processes, or None."""
    if scheduler is None and workers is None:
        yield None  # shardcat.write starts a local cluster sized to the machine
        return
    from distributed import Client, LocalCluster

    if scheduler is not None:
        with Client(scheduler) as client:  # type: ignore[no-untyped-call]
            yield client
        return
    in_process = url.startswith("memory://")  # memory:// lives in this process only
    with (
        LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=workers,
            threads_per_worker=1,
            processes=not in_process,
            # A free loopback port: None still binds :8787, which a second write would fight for.
            dashboard_address="127.0.0.1:0",
            scheduler_port=0,
        ) as cluster,
        Client(cluster) as client,  # type: ignore[no-untyped-call]
    ):
        yield client


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


def write(
    ctx: typer.Context,
    src_dir: Annotated[
        Path,
        typer.Argument(
            help="Folder of files; files sharing a stem are one sample.",
            exists=True,
            file_okay=False,
            dir_okay=True,
            readable=True,
            metavar="SRC_DIR",
        ),
    ],
    url: Annotated[
        str, typer.Argument(help="Folder or URL the shards go to (s3://bucket/x).", metavar="URL")
    ],
    dataset: Annotated[
        str, typer.Option("--dataset", "-d", help="The dataset's name.", metavar="NAME")
    ],
    shard_size: Annotated[
        str,
        typer.Option(help="Start a new shard at this size.", callback=_check_size, metavar="SIZE"),
    ] = "256MB",
    compression: Annotated[
        str | None,
        typer.Option(
            help="Compress entries: zstd or lz4 (default: none).",
            callback=_check_codec,
            metavar="CODEC",
        ),
    ] = None,
    mode: Annotated[
        Mode,
        typer.Option(help="create: new dataset; append: add keys; overwrite: replace its records."),
    ] = Mode.create,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1, help="Start a local Dask cluster of N processes (default: one per core)."
        ),
    ] = None,
    scheduler: Annotated[
        str | None,
        typer.Option(
            help="Use a running Dask scheduler (tcp://host:8786) instead.", metavar="ADDRESS"
        ),
    ] = None,
    batch_size: Annotated[
        int, typer.Option(min=1, help="Samples per Dask task (each task writes its own shards).")
    ] = 2048,
    progress: Annotated[
        bool, typer.Option(help="Show a progress bar (on stderr; never with --json).")
    ] = True,
) -> None:
    """Pack a folder into shards: `a/img1.jpg` + `a/img1.cls` become sample `a/img1` (jpg, cls).

    A sample's key is the file's path under SRC_DIR up to the first dot of
    its name; the rest of the name is the entry (`x.seg.png` → entry
    `seg.png`). Hidden files are skipped. Files are read lazily and written in
    parallel by Dask; every record is registered in the catalog, visible once
    the whole job commits.
    """
    from ..orchestration.write import write as write_dataset

    if workers is not None and scheduler is not None:
        raise typer.BadParameter("give --workers or --scheduler, not both", param_hint="--workers")
    state = state_of(ctx)
    if state.verbose < 2:  # Dask's INFO lines (scheduler, nanny) bury the progress bar
        import distributed  # noqa: F401  (importing it sets its loggers' levels; override after)

        logging.getLogger("distributed").setLevel(logging.WARNING)
    samples = group_samples(src_dir, iter_files(src_dir))
    out = state.out
    with (
        open_catalog(state, create=True) as cat,
        _client(workers, scheduler, url) as client,
        out.write_progress(progress) as bar,
    ):
        summary = write_dataset(
            samples,
            url,
            catalog=cat,
            dataset=dataset,
            shard_size=shard_size,
            compression=compression,
            mode=mode.value,
            storage_options=state.storage_options,
            client=client,
            batch_size=batch_size,
            progress=bar,
        )
    out.write_summary(summary)
