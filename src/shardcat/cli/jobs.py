"""What the commands that run a Dask job share: where it runs, Dask's logging, the catalog, the bar.

``index-tar``, ``index-files``, ``taridx import``, ``export``, ``copy`` and
``compact`` each parse their own options, then run their job inside
:func:`dask_job` and print its summary; errors reach ``app.main``, which maps
them to exit codes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

import typer

from .common import State, dask_cluster, open_catalog, state_of
from .output import Output

if TYPE_CHECKING:
    from ..orchestration.cluster import DaskCluster
    from ..orchestration.watch import TaskProgressCallback
    from ..reading import Catalog

__all__ = ["JobArgs", "JobRun", "dask_job", "quiet_dask"]


def quiet_dask(verbose: int) -> None:
    """Keep Dask's INFO lines (scheduler, nanny) off stderr below ``-vv``: they bury the result."""
    if verbose < 2:
        import distributed  # noqa: F401  (importing it sets its loggers' levels; override after)

        logging.getLogger("distributed").setLevel(logging.WARNING)


class JobArgs(TypedDict):
    """What every job is called with from the command line: ``run(..., **job.args)``."""

    storage_options: dict[str, Any]
    """The global ``-S`` options (those of the catalog's and the data's stores)."""
    client: DaskCluster | None
    """Where ``--workers``/``--scheduler`` say the job runs (None: the job's default)."""
    progress: TaskProgressCallback | None
    """The bar's drawer, or None (``--no-progress``, ``--json``)."""


@dataclass(frozen=True)
class JobRun:
    """What a job command runs its job with, and prints its summary through."""

    state: State
    catalog: Catalog
    args: JobArgs

    @property
    def out(self) -> Output:
        return self.state.out


@contextmanager
def dask_job(
    ctx: typer.Context,
    workers: int | None,
    scheduler: str | None,
    progress: bool,
    doing: str,
    unit: str,
    *,
    create: bool = False,
) -> Iterator[JobRun]:
    """The catalog open and a task bar (``doing 3/10 unit``) drawn while a job runs.

    ``workers``, ``scheduler`` and ``progress`` are the command's
    :data:`~.common.WorkersOption`, :data:`~.common.SchedulerOption` and
    :data:`~.common.ProgressOption`. ``create``: the job may create the
    catalog (commands that register data); otherwise a SQLite catalog that
    does not exist is an error.

    Raises
    ------
    typer.BadParameter
        Both ``--workers`` and ``--scheduler`` are given.
    CatalogError
        As :func:`~.common.open_catalog`.
    """
    cluster = dask_cluster(workers, scheduler)
    state = state_of(ctx)
    quiet_dask(state.verbose)
    with (
        open_catalog(state, create=create) as cat,
        state.out.task_progress(doing, unit, progress) as bar,
    ):
        yield JobRun(
            state, cat, JobArgs(storage_options=state.storage_options, client=cluster, progress=bar)
        )
