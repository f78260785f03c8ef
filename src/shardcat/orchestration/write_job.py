"""A write job's life in the catalog: the dataset it writes into, its job, its commit.

Shared by the Dask write (:mod:`.write`) and the in-process
:class:`~shardcat.orchestration.DatasetWriter`: what a mode allows, where a
dataset's folder is, which partition numbers a job takes, and how its
shards become one version.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from .._types import ON_DUPLICATE, OnDuplicate
from ..catalog import internal
from ..catalog.groups import SKIPPED_DUPLICATES, SKIPPED_KEYS, GroupWrite
from ..catalog.hashkeys import check_key_mode
from ..catalog.missing import unknown_dataset
from ..errors import DatasetExistsError, DatasetNotFoundError, DatasetRootError, Hint
from ..storage import GROUPS_FOLDER, is_local, join, local_path, redact, resolve
from .inputs import InputsFingerprint
from .plan import SHARDS_PER_PARTITION
from .resume import job_properties

if TYPE_CHECKING:
    from ..catalog import DatasetInfo, JobInfo, ShardRow
    from ..reading import Catalog

__all__ = [
    "Mode",
    "append_target",
    "begin_write_job",
    "check_mode",
    "commit_write_job",
    "dataset_root",
    "open_dataset",
]

Mode = Literal["create", "append", "overwrite"]


def check_mode(mode: str, on_duplicate: str) -> None:
    """Refuse a write mode and duplicate policy that do not go together (ValueError)."""
    if mode not in ("create", "append", "overwrite"):
        raise ValueError(f"mode must be 'create', 'append' or 'overwrite', not {mode!r}")
    if on_duplicate not in ON_DUPLICATE:
        raise ValueError(f"on_duplicate must be one of {ON_DUPLICATE}, not {on_duplicate!r}")
    if on_duplicate != "error" and mode != "append":
        raise ValueError(f"on_duplicate={on_duplicate!r} needs mode='append', not {mode!r}")


def dataset_root(url: str, storage_options: dict[str, Any]) -> str:
    """The dataset folder's URL as stored: a local path made absolute, the URL checked.

    A relative path would make the catalog depend on the working folder. A
    bad URL fails here, typed, before a job is opened or a worker sees it.
    """
    if is_local(url):
        url = os.path.abspath(local_path(url))
    resolve(url, storage_options)
    return url


def open_dataset(
    cat: Catalog,
    dataset: str,
    url: str,
    mode: str,
    *,
    group: bool = False,
    keys: str | None = None,
) -> tuple[list[ShardRow], bool]:
    """Create the dataset if it is new, refuse what the mode does not allow; its shards' rows.

    Returns the dataset's shard rows (every state) and whether this call
    created it (a failed first job removes it again: :func:`forget_failed_dataset`).

    ``append`` adds to a dataset that exists, in its own folder: a misspelt
    name would otherwise start a new dataset, and another folder would spread
    one dataset over two. A dataset without any shard row (created by hand,
    or a first job that failed before staging anything) takes ``url`` as
    its folder. ``group``: the job writes a column group (:func:`append_target`).
    ``keys``: what a new dataset keeps of its keys (``"text"``, ``"unsorted"``, ``"hash"``:
    :meth:`Catalog.create_dataset`); None: ``"text"`` for a new one, the
    existing one's as it is. Given, it must be the existing dataset's.

    Raises
    ------
    DatasetExistsError
        ``mode="create"`` and the dataset already has committed records.
    DatasetNotFoundError
        ``mode="append"`` and there is no such dataset.
    DatasetRootError
        ``mode="append"`` into another folder than the dataset's.
    DatasetExistsError
        ``keys`` is not the existing dataset's.
    ValueError
        ``keys`` is not a key mode.
    """
    root = redact(url)
    if keys is not None:
        check_key_mode(keys)  # a typo is a ValueError, not "another key mode"
    if mode == "append":
        created = False
        info, existing = append_target(cat, dataset, root, group=group)
    else:
        try:
            info, created = cat.create_dataset(dataset, root, keys=keys or "text"), True
        except DatasetExistsError:
            created, info = False, cat.info(dataset)
        existing = cat.shards(dataset, state=None)
    if keys is not None and info.keys != keys:
        raise DatasetExistsError(
            f"dataset {dataset!r} keeps keys={info.keys!r}, not {keys!r} (a dataset's key "
            "mode is chosen when it is created)",
            hint=Hint(
                python=f"pass keys={info.keys!r} or leave it out, or write a new dataset",
                cli=f"pass --keys {info.keys} or leave it out, or write a new dataset",
            ),
        )
    if not existing and not _same_folder(info.root_url, root):
        internal.set_dataset_root(cat, dataset, root)
    if mode == "create" and any(s.state == "committed" for s in existing):
        raise DatasetExistsError(
            f"dataset {dataset!r} already has records",
            hint=DatasetExistsError.APPEND_OR_OVERWRITE,
        )
    return existing, created


def append_target(
    cat: Catalog, dataset: str, root: str, *, group: bool = False
) -> tuple[DatasetInfo, list[ShardRow]]:
    """The dataset an append adds to, and its shard rows; refused if missing or elsewhere.

    ``group``: the append writes a column group, whose shards may also go in the
    dataset's ``_groups/`` folder (:func:`~.groups.group_root`).

    Raises
    ------
    DatasetNotFoundError
        There is no such dataset (the message names the known ones).
    DatasetRootError
        The dataset has shards, under another folder than ``root``.
    """
    names = [d.name for d in cat.datasets()]
    if dataset not in names:
        raise DatasetNotFoundError(
            f"cannot append: {unknown_dataset(dataset, names).message}",
            hint=Hint(
                python="check the name, or write with mode='create' to start a new dataset",
                cli="check the name, or write with --mode create to start a new dataset",
            ),
        )
    info = cat.info(dataset)
    existing = cat.shards(dataset, state=None)
    folders = [info.root_url, join(info.root_url, GROUPS_FOLDER)] if group else [info.root_url]
    if existing and not any(_same_folder(folder, root) for folder in folders):
        raise DatasetRootError(
            f"dataset {dataset!r} keeps its shards under {info.root_url}, not {root}: "
            "one dataset lives in one folder",
            hint=Hint(
                python=f"append with url={info.root_url!r}, or move the dataset there first "
                f"(shardcat.copy_dataset(catalog, {dataset!r}, {root!r}, move=True))",
                cli=f"append into {info.root_url}, or move the dataset there first "
                f"(`shardcat copy {dataset} {root} --move`)",
            ),
        )
    return info, existing


def _same_folder(a: str, b: str) -> bool:
    """Whether two dataset roots name one folder (``/d``, ``/d/``, ``file:///d``)."""
    if is_local(a) and is_local(b):
        return os.path.abspath(local_path(a)) == os.path.abspath(local_path(b))
    return a.rstrip("/") == b.rstrip("/")


def begin_write_job(
    cat: Catalog,
    dataset: str,
    url: str,
    mode: str,
    existing: list[ShardRow],
    description: str,
    job_name: str | None = None,
    inputs: InputsFingerprint | None = None,
) -> tuple[JobInfo, int, int]:
    """Open a write job: ``(job, base_version, partition_base)``."""
    # What an overwrite replaces: the dataset as it is now. Another commit
    # meanwhile makes this job's commit fail instead of dropping that data.
    base_version: int = cat.info(dataset).version
    # Number this job's partitions after every shard the dataset had (readable
    # names in order); the job id in every name is what keeps jobs apart.
    numbers = [s.shard_number for s in existing if s.shard_number is not None]
    partition_base = max(numbers) // SHARDS_PER_PARTITION + 1 if numbers else 0
    job = cat.begin_job(
        dataset,
        description=description,
        properties=job_properties(
            mode=mode,
            root=redact(url),
            base_version=base_version,
            partition_base=partition_base,
            job_name=job_name,
            inputs=inputs,
        ),
    )
    return job, base_version, partition_base


def commit_write_job(
    cat: Catalog,
    job_id: int,
    shards: list[str],
    mode: str,
    base_version: int,
    on_duplicate: OnDuplicate,
    message: str | None,
    storage_options: Mapping[str, Any] | None = None,
    group: GroupWrite | None = None,
) -> int:
    """Commit a write job's shards as one version, as ``mode`` says (see :func:`write`).

    ``group``: the job is ``add_entries``' (an append whose records become the group's).
    Returns how many of the job's records the version left out: a group's samples whose
    keys the dataset lacks (``on_missing="skip"``), else records whose keys it had
    (``on_duplicate="skip"``); the commit wrote the count on the job's row.
    """
    operation = {"create": "write"}.get(mode, mode)
    if group is not None:
        operation = "replace-entries" if group.mode == "replace" else "add-entries"
    cat.commit_job(
        job_id,
        shards=shards,
        replace=mode == "overwrite",
        expected_version=base_version if mode == "overwrite" else None,
        require_empty=mode == "create",
        on_duplicate=on_duplicate,
        operation=operation,
        message=message,
        storage_options=storage_options,
        group=group,
    )
    if group is None and on_duplicate != "skip":
        return 0
    properties = cat.job(job_id).properties or {}
    return int(properties.get(SKIPPED_KEYS if group is not None else SKIPPED_DUPLICATES, 0))
