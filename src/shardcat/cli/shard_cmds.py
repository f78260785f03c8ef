"""Commands that work on shard files alone: inspect, and the demo."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

import typer

from .output import ShardInspection


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect)
    app.command("demo")(demo)


def inspect(
    ctx: typer.Context,
    shard: Annotated[str, typer.Argument(help="Path or URL of a shard file.")],
    records: Annotated[
        int, typer.Option("--records", "-n", help="Also list the first N records.")
    ] = 0,
    verify: Annotated[
        bool, typer.Option("--verify", help="Read every byte and check every CRC.")
    ] = False,
) -> None:
    """Print a shard's header, footer, entry kinds and metadata."""
    import numpy as np

    from ..storage.shards import ShardReader

    state = ctx.obj
    out = state.out
    with ShardReader(shard, storage_options=state.storage_options) as r:
        h, t, f = r.header, r.trailer, r.footer
        created = dt.datetime.fromtimestamp(h.created_us / 1e6, tz=dt.timezone.utc)
        counts = (
            np.bincount(f.entries["spec"], minlength=len(f.specs))
            if len(f.entries)
            else [0] * len(f.specs)
        )
        sizes = (
            np.bincount(f.entries["spec"], weights=f.entries["size"], minlength=len(f.specs))
            if len(f.entries)
            else [0] * len(f.specs)
        )
        shard_fields = {
            "path": r.path,
            "size": r.size,
            "format": f"{h.version[0]}.{h.version[1]}",
            "created": created.isoformat(),
            "file_id": h.file_uuid.hex,
            "shard_number": None if h.shard_number < 0 else h.shard_number,
            "alignment": h.alignment,
            "default_codec": h.default_codec.label,
            "flags": h.flags,
            "records": t.record_count,
            "entries": t.entry_count,
            "footer_offset": t.footer_offset,
            "footer_bytes": r.size - t.footer_offset,
            "header_crc": f"{h.crc:#010x}",
            "data_crc": f"{t.data_crc:#010x}",
            "footer_crc": f"{t.footer_crc:#010x}",
            "writer": f.metadata.get("writer"),
        }
        specs = [
            {
                "name": s.name,
                "content_type": s.content_type,
                "codec": s.codec.label,
                "count": int(c),
                "bytes": int(b),
            }
            for s, c, b in zip(f.specs, counts, sizes)
        ]
        listed: list[dict[str, Any]] = []
        if records:
            starts = f.entry_starts
            for i in range(min(records, len(r))):
                row = f.records[i]
                names = [
                    f.specs[int(e)].name
                    for e in f.entries["spec"][int(starts[i]) : int(starts[i + 1])]
                ]
                listed.append(
                    {
                        "index": i,
                        "key": f.key_bytes(i).decode("utf-8"),
                        "offset": int(row["offset"]),
                        "length": int(row["length"]),
                        "entries": names,
                    }
                )
        verified = None
        if verify:
            verified = r.verify()

    out.inspection(
        ShardInspection(
            fields=shard_fields,
            entry_kinds=specs,
            metadata=r.metadata,
            records=listed if records else None,
            verified=verified,
        )
    )


def demo(
    ctx: typer.Context,
    out_dir: Annotated[
        str, typer.Option("--out", help="Folder (or URL) for the demo dataset's shards.")
    ] = "shardcat-demo",
    samples: Annotated[int, typer.Option("--samples", help="How many samples to generate.")] = 4000,
    shard_size: Annotated[
        str, typer.Option("--shard-size", help="Roll over to a new shard at this size.")
    ] = "2MB",
    workers: Annotated[
        int, typer.Option("--workers", help="Worker processes of the local Dask cluster.")
    ] = 2,
    scheduler: Annotated[
        str | None,
        typer.Option("--scheduler", help="Use this Dask scheduler instead of a local cluster."),
    ] = None,
) -> None:
    """Write a demo dataset with Dask and a SQL catalog, then look up, query, stream and verify it.

    The catalog is the global --catalog when given, else a SQLite file in the
    demo folder.
    """
    from ..catalog import DEFAULT_URL
    from ..demo import run_demo

    state = ctx.obj
    chosen = getattr(state, "catalog_url", None)
    catalog = chosen if chosen and chosen != DEFAULT_URL else None
    out = state.out
    with out.write_progress() as progress:
        report = run_demo(
            out_dir,
            samples,
            shard_size,
            catalog=catalog,
            scheduler=scheduler,
            workers=workers,
            storage_options=state.storage_options,
            progress=progress,
        )
    out.demo_report(report)
