"""Commands that check or change a dataset's shards: verify, reindex, gc, delete."""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .._units import count_of, format_bytes
from .common import SchedulerOption, open_catalog, parse_duration, state_of
from .jobs import dask_job
from .version_cmds import VersionOption, parse_version

if TYPE_CHECKING:
    from ..reading import Catalog
    from .output import Output

__all__ = ["register"]


class ShardKindChoice(str, enum.Enum):
    native = "native"
    tar = "tar"


def register(app: typer.Typer) -> None:
    app.command("verify")(verify)
    app.command("reindex")(reindex)
    app.command("gc")(gc)
    app.command("delete")(delete)


def verify(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Argument(help="The dataset's name.", metavar="DATASET")],
    workers: Annotated[
        int | None,
        typer.Option(min=1, help="Shards checked at once in this process (default 4)."),
    ] = None,
    scheduler: SchedulerOption = None,
    version: VersionOption = None,
    write_history: Annotated[
        bool,
        typer.Option(
            "--write-history",
            help="First write the version manifests the dataset's folder lacks (_versions/), "
            "from the catalog.",
        ),
    ] = False,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            help="Read no record: compare each shard's size, header and trailer with its "
            "catalog row, and its rows' count and span (one SQL query) with its records. "
            "Minutes where the full check takes hours; no CRC of the data is checked.",
        ),
    ] = False,
) -> None:
    """Read every committed shard, check every CRC and compare it with the catalog (--quick:
    each shard's header and trailer and its rows' count, no record read).

    Also compares the version manifests in the dataset's folder
    (`_versions/`) with the catalog. Prints every problem (shard, kind,
    detail); exits 1 if there is any. With --scheduler, the shards are
    checked by that Dask cluster's workers (a few shards per task, each
    compared with its own catalog rows): for datasets too large for one
    process.
    """
    at = parse_version(version)
    if scheduler is not None:
        if quick:
            raise typer.BadParameter(
                "--quick reads two small ranges a shard, in this process: leave --scheduler "
                "out (it is for the full check of datasets too large for one process)",
                param_hint="--quick",
            )
        if workers is not None:
            raise typer.BadParameter(
                "--workers counts this process's threads; with --scheduler the cluster's "
                "workers check the shards: leave --workers out",
                param_hint="--workers",
            )
        from ..orchestration.verify import verify as verify_job

        with dask_job(ctx, None, scheduler, True, "verifying", "tasks") as job:
            _write_history(job.catalog, job.out, dataset, write_history)
            report = verify_job(job.catalog, dataset, version=at, **job.args)
        out = job.out
    else:
        state = state_of(ctx)
        out = state.out
        with open_catalog(state) as cat:
            _write_history(cat, out, dataset, write_history)
            n = len(cat.dataset(dataset).shards(version=at))
            with out.verify_progress(n) as on_shard:
                report = cat.verify(
                    dataset, workers=workers or 4, on_shard=on_shard, version=at, quick=quick
                )
    out.verify_report(dataset, report)
    if not report.ok:
        raise typer.Exit(1)


def _write_history(cat: Catalog, out: Output, dataset: str, wanted: bool) -> None:
    """``--write-history``: the manifests the folder lacks, written before verify reads them."""
    if not wanted:
        return
    done = cat.write_history(dataset)
    out.note(
        f"wrote {count_of(len(done.written), 'version manifest')} "
        f"({len(done.present):,} there already)"
        + ("; updated the tags file" if done.refs_written else "")
    )


def reindex(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Argument(help="The dataset's name.", metavar="DATASET")],
    urls: Annotated[
        list[str],
        typer.Argument(
            help="Shard paths or URLs; globs (s3://b/train/*.shard) and brace patterns "
            "(train-{000000..000099}.shard) expand, and a folder names the shards in it "
            "(*.shard, or *.tar with --kind tar). Quote them from the shell.",
            metavar="URL",
        ),
    ],
    workers: Annotated[int, typer.Option(min=1, help="Footers read at once.", metavar="N")] = 8,
    kind: Annotated[
        ShardKindChoice,
        typer.Option(help="native: shardcat shards; tar: WebDataset tars, scanned again."),
    ] = ShardKindChoice.native,
    history: Annotated[
        bool | None,
        typer.Option(
            "--history/--no-history",
            help="Rebuild every kept version and tag from the folder's manifests (_versions/). "
            "Default: when URL is one folder that has them.",
        ),
    ] = None,
) -> None:
    """Rebuild a dataset's catalog rows from its shards alone, committed together.

    Disaster recovery: with the catalog lost, this creates it, and the
    dataset (its root: the shards' common folder), and says so. URLs are
    stored absolute (local paths resolved, other URLs normalised), so the
    catalog works from any folder. Rows already registered under a URL are
    replaced.

    A dataset's folder keeps its history (`_versions/`: one manifest per
    version, and the tags): given that folder, reindex rebuilds every kept
    version, what each reads and hides, and the tags, into a new dataset.
    """
    from ..reading import has_history
    from ..storage.patterns import absolute_url, expand_patterns

    state = state_of(ctx)
    if history is not False and kind is ShardKindChoice.native and len(urls) == 1:
        root = absolute_url(urls[0].rstrip("/"), state.storage_options)
        if has_history(root, state.storage_options):
            _rebuild_history(state, dataset, root, workers)
            return
    if history:
        raise typer.BadParameter(
            "--history needs one folder URL that holds a _versions/ folder of manifests",
            param_hint="URL",
        )
    suffix = ".tar" if kind is ShardKindChoice.tar else ".shard"
    expanded = expand_patterns(urls, state.storage_options, folder_suffix=suffix)
    with (
        open_catalog(state, create=True) as cat,
        _rebuilding(cat, state, dataset, lambda: _common_root(expanded)),
    ):
        rows = cat.reindex(dataset, expanded, workers=workers, kind=kind.value)
    state.out.reindexed(dataset, rows)


def _rebuild_history(state: Any, dataset: str, root: str, workers: int) -> None:
    with (
        open_catalog(state, create=True) as cat,
        _rebuilding(cat, state, dataset, lambda: root),
    ):
        rebuilt = cat.rebuild_history(dataset, root, workers=workers)
        rows = cat.shards(dataset)
    state.out.history_rebuilt(rebuilt, rows)


@contextlib.contextmanager
def _rebuilding(cat: Any, state: Any, dataset: str, root: Callable[[], str]) -> Iterator[None]:
    """The dataset a reindex fills: created if the catalog lacks it (at ``root()``), and
    removed again if the reindex fails before committing anything (its own error is the one
    to report, not a cleanup's)."""
    created = dataset not in {d.name for d in cat.datasets()}
    if created:
        folder = root()
        cat.create_dataset(dataset, folder, exist_ok=True)
    try:
        yield
    except BaseException:
        if created:
            with contextlib.suppress(Exception):
                if not cat.shards(dataset):
                    cat.delete_dataset(dataset)
        raise
    if created:
        state.out.note(f"created dataset {dataset!r} (root {folder})")


def _common_root(urls: list[str]) -> str:
    """The folder (or URL prefix) every URL lies in."""
    import posixpath

    folders = [u.rsplit("/", 1)[0] if "/" in u else "." for u in urls]
    if "://" in folders[0]:
        scheme, _, _ = folders[0].partition("://")
        paths = [f.partition("://")[2] for f in folders]
        return f"{scheme}://{posixpath.commonpath(paths)}"
    return posixpath.commonpath(folders)


def gc(
    ctx: typer.Context,
    dataset: Annotated[
        str | None,
        typer.Argument(help="Only this dataset (default: every dataset).", metavar="DATASET"),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", "-n", help="Only report what would be removed.")
    ] = False,
    grace: Annotated[
        str,
        typer.Option(
            help="Leave unregistered files younger than this (30m, 1h, 2d, 0).", metavar="DURATION"
        ),
    ] = "1h",
    stale_after: Annotated[
        str,
        typer.Option(
            help="Abort jobs left open longer than this (their writer died).", metavar="DURATION"
        ),
    ] = "24h",
) -> None:
    """Remove what failed or killed write jobs left: stale jobs, deleted shards, orphan files."""
    from ..orchestration.gc import gc as run_gc

    state = state_of(ctx)
    out = state.out
    grace_td, stale_td = parse_duration(grace), parse_duration(stale_after)
    with open_catalog(state) as cat:
        shared = _shared_roots(cat, dataset)
        if shared:
            # gc takes every unregistered file under a dataset's root for an orphan, so
            # another dataset's shards there would be deleted: leave orphans alone.
            name, other, root = shared[0]
            out.note(
                f"warning: dataset {name!r} shares its folder {root} with {other!r}"
                + (f" (and {len(shared) - 1} more overlaps)" if len(shared) > 1 else "")
                + "; orphan files are left alone, since gc cannot tell whose they are"
            )
            grace_td = dt.timedelta.max
        report = run_gc(
            cat,
            dataset,
            dry_run=dry_run,
            grace=grace_td,
            stale_after=stale_td,
            storage_options=state.storage_options,
        )
    out.gc_report(report)
    if report.errors:
        raise typer.Exit(1)


def _shared_roots(cat: Any, dataset: str | None) -> list[tuple[str, str, str]]:
    """(dataset, other dataset, root) where the other's root is the dataset's root or inside it."""
    roots = {d.name: d.root_url.rstrip("/") for d in cat.datasets()}
    names = [dataset] if dataset is not None else sorted(roots)
    return [
        (name, other, roots[name])
        for name in names
        if name in roots
        for other, root in sorted(roots.items())
        if other != name and (root == roots[name] or root.startswith(roots[name] + "/"))
    ]


def delete(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Argument(help="The dataset's name.", metavar="DATASET")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    delete_tars: Annotated[
        bool,
        typer.Option(
            "--delete-tars", help="Also delete tars indexed in place (default: rows only)."
        ),
    ] = False,
) -> None:
    """Delete a dataset: every shard object (all states), then its catalog rows.

    Asks first; without a terminal, --yes is required. Files another dataset's
    rows name, or that lie outside the dataset's root, are left in place; so
    are tars indexed in place (index-tar) unless --delete-tars is given.
    """
    from ..orchestration.gc import delete_dataset

    state = state_of(ctx)
    out = state.out
    with open_catalog(state) as cat:
        info = cat.info(dataset)
        shards = cat.shards(dataset, state=None)
        size = sum(s.size_bytes for s in shards)
        versions = cat.log(dataset)
        records = versions[0].total_records if versions else 0
        # Tags keep versions from expiring, not from an explicit delete: say which go.
        tags = [f"{t} (version {v.number})" for v in versions for t in v.tags]
        what = (
            f"dataset {dataset!r} (root {info.root_url}): {len(shards)} shard object(s), "
            f"{format_bytes(size)}, {count_of(records, 'live record')}, {count_of(len(versions), 'kept version')}"
            + (f", tagged {', '.join(tags)}" if tags else "")
        )
        if not yes:
            if not sys.stdin.isatty():
                out.error(f"would delete {what}; pass --yes to confirm without a terminal")
                raise typer.Exit(1)
            out.note(f"This deletes {what}.")
            if not typer.confirm("Delete them?", default=False, err=True):
                raise typer.Abort()
        report = delete_dataset(
            cat, dataset, storage_options=state.storage_options, delete_tars=delete_tars
        )
    for line in report.kept:
        out.note(f"kept {line}")
    out.deleted(dataset, report, shards=len(shards), size=size)
