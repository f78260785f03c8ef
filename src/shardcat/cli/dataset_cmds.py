"""Commands that read a dataset through the catalog: ls, stats, keys, count, get."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import typer

from .._units import count_of
from ..errors import InvalidKeyError, KeyNotFoundError
from .common import open_catalog, state_of
from .output import timestamp
from .version_cmds import VersionOption, parse_version

__all__ = ["register", "safe_path"]


def register(app: typer.Typer) -> None:
    app.command("ls")(ls)
    app.command("stats")(stats)
    app.command("keys")(keys)
    app.command("count")(count)
    app.command("get")(get)


# --- ls ---------------------------------------------------------------------


def ls(
    ctx: typer.Context,
    dataset: Annotated[
        str | None,
        typer.Argument(
            help="List this dataset's shards instead of the datasets.", metavar="DATASET"
        ),
    ] = None,
    all_states: Annotated[
        bool, typer.Option("--all", "-a", help="Include staged and deleted shards.")
    ] = False,
) -> None:
    """List the catalog's datasets, or one dataset's shards."""
    state = state_of(ctx)
    out = state.out
    with open_catalog(state) as cat:
        if dataset is None:
            rows = [
                {
                    "name": d.name,
                    "root": d.root_url,
                    "shards": d.shard_count,
                    "records": d.record_count,
                    "bytes": d.size_bytes,
                    "created": timestamp(d.created_at),
                }
                for d in cat.dataset_summaries()
            ]
            out.datasets(cat.url, rows)
            return
        shards = cat.shards(dataset, state=None if all_states else "committed")
    out.shards(dataset, shards, all_states=all_states)


# --- stats ------------------------------------------------------------------


def stats(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Argument(help="The dataset's name.", metavar="DATASET")],
    version: VersionOption = None,
) -> None:
    """Records, bytes, entry kinds and the shard size distribution of a dataset."""
    state = state_of(ctx)
    at = parse_version(version)
    with open_catalog(state) as cat:
        # The version's shards, and the records in them it no longer serves
        # (replaced or deleted since): counted apart, as `compact` reclaims them.
        found = cat.dataset(dataset).stats(version=at)
        groups = cat.groups(dataset)  # their shards are not the base's (docs/GROUPS.md)
    kinds = [
        {
            "name": k.name,
            "content_type": k.content_type,
            "codec": k.codec,
            "records": k.record_count,
        }
        for k in found.entry_kinds
    ]
    info, shards, number, hidden = found.info, found.shards, found.version, found.hidden_records
    state.out.dataset_stats(
        info, shards, kinds, version=number, hidden_records=hidden, groups=groups
    )


# --- keys, count ------------------------------------------------------------

PrefixOption = Annotated[
    str | None,
    typer.Option("--prefix", "-p", help="Only keys starting with this text.", metavar="TEXT"),
]


def keys(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Argument(help="The dataset's name.", metavar="DATASET")],
    prefix: PrefixOption = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=0, help="At most N keys (0 = all).", metavar="N")
    ] = 0,
) -> None:
    """List a dataset's keys in byte order, one a line, streamed from the catalog's key index.

    With --json, one JSON string a line (JSON Lines).
    """
    state = state_of(ctx)
    with open_catalog(state) as cat:
        state.out.keys(dataset, cat.keys(dataset, prefix=prefix, limit=limit))


def count(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Argument(help="The dataset's name.", metavar="DATASET")],
    prefix: PrefixOption = None,
) -> None:
    """Count a dataset's keys (starting with --prefix), from the catalog's key index."""
    state = state_of(ctx)
    with open_catalog(state) as cat:
        n = cat.count(dataset, prefix=prefix)
    state.out.key_count(dataset, prefix, n)


# --- get --------------------------------------------------------------------


def safe_path(folder: Path, key: str, entry: str) -> Path:
    """``folder/<key>.<entry>``, the key's slashes as sub-folders, never outside ``folder``.

    Raises
    ------
    InvalidKeyError
        If the key or entry would escape ``folder`` (``..``, absolute paths).
    """
    parts = f"{key}.{entry}".split("/")
    if (
        any(p in ("", ".", "..") for p in parts)
        or "\\" in key + entry
        or "\0" in key + entry
        or Path(parts[0]).is_absolute()
    ):
        raise InvalidKeyError(
            f"key {key!r} (entry {entry!r}) is not a safe relative path; refusing to save it "
            f"under {folder}"
        )
    path = folder.joinpath(*parts)
    if not path.resolve().is_relative_to(folder.resolve()):
        raise InvalidKeyError(f"key {key!r} would be saved outside {folder}; refusing")
    return path


def _save(folder: Path, records: Iterable[Any]) -> list[dict[str, Any]]:
    # Every path is checked before the first file is written.
    planned = [
        (safe_path(folder, record.key, name), record.key, name, entry)
        for record in records
        for name, entry in record.entries.items()
    ]
    saved = []
    for path, key, name, entry in planned:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(entry.view)
        saved.append({"key": key, "entry": name, "path": str(path), "bytes": len(entry)})
    return saved


def _read_keys(source: str) -> list[str]:
    text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    return [line.rstrip("\r") for line in text.split("\n") if line.strip()]


def get(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Argument(help="The dataset's name.", metavar="DATASET")],
    key: Annotated[str | None, typer.Argument(help="The sample's key.", metavar="KEY")] = None,
    entry: Annotated[
        list[str] | None,
        typer.Option(
            "--entry",
            "-e",
            help="Only this entry (repeatable). One entry without -o: its raw bytes to stdout.",
            metavar="NAME",
        ),
    ] = None,
    output_dir: Annotated[
        Path | None,
        typer.Option(
            "--output-dir",
            "-o",
            help="Save entries as DIR/<key>.<entry>.",
            file_okay=False,
            metavar="DIR",
        ),
    ] = None,
    keys_from: Annotated[
        str | None,
        typer.Option(
            "--keys-from", help="Read keys from FILE, one a line (- for stdin).", metavar="FILE"
        ),
    ] = None,
    version: VersionOption = None,
) -> None:
    """Print or save a sample's entries, or many samples' with --keys-from.

    Without -o the sample is printed: text and JSON decoded, other entries as
    `<N bytes type>`; `--entry NAME` alone writes that entry's bytes to stdout
    (binary-safe, for piping). Missing keys are reported and exit 1, after
    the others are saved.
    """
    if (key is None) == (keys_from is None):
        raise typer.BadParameter("give a KEY or --keys-from FILE (not both)", param_hint="KEY")
    state = state_of(ctx)
    out = state.out
    names = list(entry) if entry else None
    at = parse_version(version)
    keys = [key] if key is not None else _read_keys(keys_from or "-")
    with open_catalog(state) as cat:
        if key is not None:
            records = [cat.get(dataset, key, entries=names, version=at)]
            missing: list[str] = []
        else:
            batch = cat.get_many(dataset, keys, entries=names, version=at)
            records = [r for r in batch.records if r is not None]
            missing = list(batch.missing)
        for r in records:
            absent = [n for n in names or [] if n not in r.entries]
            if absent:
                have = ", ".join(sorted(cat.get(dataset, r.key, version=at).entries))
                raise KeyNotFoundError(
                    f"sample {r.key!r} has no entry {absent[0]!r}; its entries are: {have}"
                )
    if output_dir is not None:
        out.saved(output_dir, _save(output_dir, records), len(records), missing)
    elif key is not None:
        # One entry of one sample: its raw bytes, for pipes (the text output).
        raw = names[0] if names is not None and len(names) == 1 else None
        out.sample(records[0], raw_entry=raw)
    else:
        out.samples(records, missing)
    if missing:
        shown = ", ".join(repr(k) for k in missing[:10])
        more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        out.error(f"{count_of(len(missing), 'key')} not found in {dataset!r}: {shown}{more}")
        raise typer.Exit(1)
