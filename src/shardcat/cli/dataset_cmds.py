"""Commands that read a dataset through the catalog: ls, stats, get."""

from __future__ import annotations

import statistics
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import typer

from .._units import format_bytes
from ..errors import InvalidKeyError, KeyNotFoundError
from .common import open_catalog, state_of, timestamp
from .output import err_console

__all__ = ["register", "safe_path"]


def register(app: typer.Typer) -> None:
    app.command("ls")(ls)
    app.command("stats")(stats)
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
            if out.as_json:
                out.json(rows)
                return
            out.table(
                f"Datasets in {cat.url}",
                ["name", "root", "shards", "records", "bytes", "created"],
                [
                    [
                        r["name"],
                        r["root"],
                        r["shards"],
                        f"{r['records']:,}",
                        format_bytes(r["bytes"]),
                        r["created"],
                    ]
                    for r in rows
                ],
            )
            if not rows:
                out.line("no datasets yet: write one with `shardcat write SRC_DIR URL -d NAME`")
            return
        shards = cat.shards(dataset, state=None if all_states else "committed")
    if out.as_json:
        out.json(
            [
                {
                    "url": s.url,
                    "state": s.state,
                    "shard_number": s.shard_number,
                    "job_id": s.job_id,
                    "records": s.record_count,
                    "bytes": s.size_bytes,
                    "payload_bytes": s.payload_bytes,
                    "created": s.created_at.isoformat(),
                }
                for s in shards
            ]
        )
        return
    out.table(
        f"Shards of {dataset}" + ("" if all_states else " (committed)"),
        ["url", "state", "records", "bytes", "created"],
        [
            [
                s.url,
                s.state,
                f"{s.record_count:,}",
                format_bytes(s.size_bytes),
                timestamp(s.created_at),
            ]
            for s in shards
        ],
    )
    committed = [s for s in shards if s.state == "committed"]
    by_state = Counter(s.state for s in shards)
    states = ", ".join(f"{n} {state}" for state, n in sorted(by_state.items()))
    out.line(
        f"{len(shards)} shard(s)" + (f" ({states})" if all_states and shards else "") + ": "
        f"{sum(s.record_count for s in committed):,} committed records, "
        f"{format_bytes(sum(s.size_bytes for s in committed))}",
        markup=False,
    )


# --- stats ------------------------------------------------------------------


def _spread(values: list[int]) -> dict[str, float | int | None]:
    if not values:
        return {"min": None, "median": None, "max": None}
    median = statistics.median(values)
    if isinstance(median, float) and median.is_integer():
        median = int(median)
    return {"min": min(values), "median": median, "max": max(values)}


def stats(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Argument(help="The dataset's name.", metavar="DATASET")],
) -> None:
    """Records, bytes, entry kinds and the shard size distribution of a dataset."""
    state = state_of(ctx)
    with open_catalog(state) as cat:
        info = cat.dataset(dataset)
        shards = cat.shards(dataset)
        kinds = [
            {
                "name": k.name,
                "content_type": k.content_type,
                "codec": k.codec,
                "records": k.record_count,
            }
            for k in cat.entry_kinds(dataset)
        ]
    sizes = [s.size_bytes for s in shards]
    counts = [s.record_count for s in shards]
    doc: dict[str, Any] = {
        "dataset": info.name,
        "root": info.root_url,
        "created": info.created_at.isoformat(),
        "version": info.version,
        "shards": len(shards),
        "records": sum(counts),
        "bytes": sum(sizes),
        "payload_bytes": sum(s.payload_bytes for s in shards),
        "shard_bytes": _spread(sizes),
        "shard_records": _spread(counts),
        "entry_kinds": kinds,
    }
    out = state.out
    if out.as_json:
        out.json(doc)
        return

    def size(v: float | int | None) -> str:
        return "-" if v is None else format_bytes(v)

    sb, sr = doc["shard_bytes"], doc["shard_records"]
    out.fields(
        f"Dataset {info.name}",
        {
            "root": info.root_url,
            "created": timestamp(info.created_at),
            "version": info.version,
            "shards": len(shards),
            "records": f"{doc['records']:,}",
            "bytes": f"{doc['bytes']:,} ({format_bytes(doc['bytes'])})",
            "payload bytes": f"{doc['payload_bytes']:,} ({format_bytes(doc['payload_bytes'])})",
            "shard size min / median / max": " / ".join(
                size(sb[k]) for k in ("min", "median", "max")
            ),
            "records per shard min / median / max": " / ".join(
                "-" if sr[k] is None else f"{sr[k]:,}" for k in ("min", "median", "max")
            ),
        },
    )
    out.table(
        "Entry kinds",
        ["name", "content_type", "codec", "records"],
        [[k["name"], k["content_type"], k["codec"], f"{k['records']:,}"] for k in kinds],
    )


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


def _describe(entry: Any) -> tuple[Any, bool]:
    """(printable value, whether it is the decoded content) of an entry."""
    ctype = entry.content_type
    base = ctype.split(";", 1)[0].strip()
    if base.startswith("text/") or base == "application/json" or base.endswith("+json"):
        try:
            return entry.decode(), True
        except ValueError:  # undecodable text or JSON: show it as bytes
            pass
    if base == "application/x-npy":
        try:
            a = entry.decode()
            return f"<array shape={tuple(a.shape)} dtype={a.dtype}>", False
        except ValueError:
            pass
    return f"<{len(entry):,} bytes {ctype}>", False


def _sample_doc(record: Any) -> dict[str, Any]:
    entries: dict[str, Any] = {}
    for name, entry in record.entries.items():
        value, decoded = _describe(entry)
        item: dict[str, Any] = {"content_type": entry.content_type, "bytes": len(entry)}
        if decoded:
            item["value"] = value
        entries[name] = item
    return {"key": record.key, "entries": entries}


def _shown(entry: Any) -> Any:
    value = _describe(entry)[0]
    return value.rstrip("\n") if isinstance(value, str) else value


def _print_sample(out: Any, record: Any) -> None:
    out.fields(
        f"Sample {record.key}",
        {name: _shown(entry) for name, entry in record.entries.items()} or {"(no entries)": ""},
    )


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
    keys = [key] if key is not None else _read_keys(keys_from or "-")
    with open_catalog(state) as cat:
        if key is not None:
            records = [cat.get(dataset, key, entries=names)]
            missing: list[str] = []
        else:
            batch = cat.get_many(dataset, keys, entries=names)
            records = [r for r in batch.records if r is not None]
            missing = list(batch.missing)
        for r in records:
            absent = [n for n in names or [] if n not in r.entries]
            if absent:
                have = ", ".join(sorted(cat.get(dataset, r.key).entries))
                raise KeyNotFoundError(
                    f"sample {r.key!r} has no entry {absent[0]!r}; its entries are: {have}"
                )
    if output_dir is not None:
        saved = _save(output_dir, records)
        if out.as_json:
            out.json({"saved": saved, "missing": missing})
        else:
            total = sum(s["bytes"] for s in saved)
            out.line(
                f"saved {len(saved)} file(s), {format_bytes(total)}, of {len(records)} sample(s) "
                f"to {output_dir}",
                markup=False,
            )
    elif names is not None and len(names) == 1 and key is not None and not out.as_json:
        _raw(records[0].entries[names[0]], key)
    elif out.as_json:
        docs = [_sample_doc(r) for r in records]
        out.json(docs[0] if key is not None else {"samples": docs, "missing": missing})
    else:
        for r in records:
            _print_sample(out, r)
    if missing:
        shown = ", ".join(repr(k) for k in missing[:10])
        more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        err_console.print("[red]error:[/red] ", end="")
        err_console.print(
            f"{len(missing)} key(s) not found in {dataset!r}: {shown}{more}", markup=False
        )
        raise typer.Exit(1)


def _raw(entry: Any, key: str) -> None:
    """The entry's bytes to stdout; refuses to spray binary at a terminal."""
    if sys.stdout.isatty() and _describe(entry)[1] is False:
        err_console.print(
            f"error: entry of {key!r} is {len(entry):,} bytes of {entry.content_type}; redirect "
            "stdout to a file (> FILE) or save it with -o DIR",
            markup=False,
        )
        raise typer.Exit(1)
    sys.stdout.flush()
    sys.stdout.buffer.write(entry.view)
    sys.stdout.buffer.flush()
