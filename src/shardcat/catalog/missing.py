"""What the catalog says about a dataset name it does not hold (no ORM: lookups raise it too)."""

from __future__ import annotations

from ..errors import DatasetNotFoundError, Hint

__all__ = ["unknown_dataset"]


def unknown_dataset(name: str, known: list[str]) -> DatasetNotFoundError:
    """DatasetNotFoundError listing (the first few) known dataset names."""
    if known:
        shown = ", ".join(repr(k) for k in known[:10]) + (
            f" and {len(known) - 10} more" if len(known) > 10 else ""
        )
        return DatasetNotFoundError(
            f"no dataset named {name!r} in the catalog; known datasets: {shown}"
        )
    return DatasetNotFoundError(
        f"no dataset named {name!r}: the catalog has no datasets yet",
        hint=Hint(
            python="write one with shardcat.write, or create one with Catalog.create_dataset",
            cli="write one with `shardcat write SRC URL -d NAME`, or rebuild one from its "
            "shards with `shardcat reindex NAME URL...`",
        ),
    )
