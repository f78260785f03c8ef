"""Column groups: :func:`add_entries` writes entries of existing samples as a group (docs/GROUPS.md).

The write job is :func:`~.write.write`'s, appending into the dataset's own
folder: shards that hold only the new entries, keyed like the dataset, and
one commit that makes them a group's (:func:`shardcat.catalog.groups.apply_group`
checks the keys and entry names in the commit's transaction). Dropping a group
is :meth:`Catalog.drop_group`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..catalog.groups import (
    GroupMode,
    GroupWrite,
    OnMissing,
    check_group_write,
    no_group_to_replace,
)
from ..catalog.hashkeys import GROUPS_OPERATION, needs_key_text
from ..catalog.kinds import shard_kind
from ..storage import GROUPS_FOLDER, dataset_prefix, join
from .cluster import ClientChoice
from .progress import WriteProgressCallback
from .write import WriteSummary, _write

if TYPE_CHECKING:
    from ..reading import Catalog

__all__ = ["add_entries", "group_prefix", "group_root"]


def group_prefix(dataset: str, group: str) -> str:
    """The file-name prefix of a group's shards: the dataset's, then the group's name."""
    return f"{dataset_prefix(dataset)}.{group}"


def group_root(cat: Catalog, dataset: str) -> str:
    """Where a group's shards are written: the dataset's folder, or its ``_groups/`` folder when
    the base is indexed in place (the folder is the user's: indexing it again must not find them).

    Raises
    ------
    DatasetNotFoundError
        There is no such dataset.
    """
    root = cat.info(dataset).root_url
    if all(shard_kind(s.kind).owns_files for s in cat.shards(dataset)):
        return root
    return join(root, GROUPS_FOLDER)


def add_entries(
    samples: Any,
    *,
    catalog: Catalog | str,
    dataset: str,
    group: str,
    mode: GroupMode = "append",
    on_missing: OnMissing = "error",
    replace_entries: bool = False,
    shard_size: int | str = "256MB",
    max_records_per_shard: int | None = None,
    compression: str | None = None,
    message: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    key_column: str = "__key__",
    json_entry: str = "json",
    client: ClientChoice = None,
    batch_size: int = 2048,
    retries: int = 2,
    progress: bool | WriteProgressCallback | None = True,
    job_name: str | None = None,
    resume: bool = False,
) -> WriteSummary:
    """Add entries to samples the dataset has, as the column group ``group``: one new version.

    A Dask job writes shards into the dataset's folder (its ``_groups/`` folder when
    the base is indexed in place) that hold only these entries, keyed like the
    dataset (no shard of the dataset is rewritten), and
    commits them as one version. Lookups then return each sample's base
    entries and every group's (docs/GROUPS.md).

    Parameters
    ----------
    samples:
        What :func:`shardcat.write` takes: a Dask bag or iterable of sample
        dicts (``{"__key__": key, "caption.txt": ...}``), a dataframe, or
        :func:`shardcat.from_files` (files named ``KEY.ENTRY``).
    group:
        The group's name (letters, digits, ``.``, ``_``, ``-``).
    mode:
        ``"append"``: a new group, or keys new to it (a key the group has is
        a DuplicateKeyError); ``"replace"``: the group's entries of these keys
        are replaced from the new version on (fix part of a group; keys it
        did not have are added).
    on_missing:
        A key the dataset does not have: ``"error"`` (UnknownKeysError naming
        some) or ``"skip"`` (left out, counted in ``WriteSummary.skipped_keys``).
    replace_entries:
        An entry name a sample already has (in its base or an older group)
        is an EntryExistsError unless this is true: then the new entry is the
        one read from the new version on (older versions read the old one).

    The other parameters are :func:`shardcat.write`'s.

    Raises
    ------
    DatasetNotFoundError
        There is no such dataset.
    UnknownKeysError
        Keys the dataset does not have (``on_missing="error"``).
    EntryExistsError
        Entry names the samples have already (see ``replace_entries``).
    GroupNotFoundError
        ``mode="replace"`` of a group the dataset does not have.
    DuplicateKeyError
        A key twice in ``samples``, or (``append``) already in the group.
    """
    spec = GroupWrite(group, mode, on_missing, replace_entries)
    check_group_write(spec)
    from ..reading import Catalog

    with Catalog.opened(catalog) as cat:
        root = group_root(cat, dataset)  # DatasetNotFoundError before anything starts
        # What the commit would refuse, refused before any shard is written (the commit
        # checks again: another client may drop the group meanwhile).
        needs_key_text(dataset, cat.info(dataset).keys, GROUPS_OPERATION)
        if mode == "replace" and all(
            g.name != group or g.dropped_version is not None for g in cat.groups(dataset)
        ):
            raise no_group_to_replace(dataset, group, "nothing was written")
        return _write(
            samples,
            root,
            catalog=cat,
            dataset=dataset,
            shard_size=shard_size,
            max_records_per_shard=max_records_per_shard,
            compression=compression,
            metadata=None,
            mode="append",
            on_duplicate="error",
            message=message,
            storage_options=storage_options,
            key_column=key_column,
            json_entry=json_entry,
            fields=None,
            prefix=group_prefix(dataset, group),
            client=client,
            batch_size=batch_size,
            retries=retries,
            progress=progress,
            job_name=job_name,
            resume=resume,
            allow_changed_inputs=False,
            group=spec,
        )
