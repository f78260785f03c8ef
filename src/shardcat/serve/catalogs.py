"""The catalogs one ``shardcat serve`` process reads, by name, and what a caller may see of them.

Each catalog is opened once per process, on first use (after uvicorn forked
its workers: a :class:`~shardcat.Catalog` keeps per-thread connections and
open files). A caller sees a dataset when its token's catalog is that
catalog and its scope names it; otherwise, and when the dataset does not
exist, the answer is the same 404, so that a scoped token cannot learn which
other datasets exist.

:meth:`Catalogs.scrub` hides the store locations (each dataset's root URL)
and the catalogs' own URLs in any text before it reaches a response: the
last guard behind :mod:`.encoding`, which names no location to begin with.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy.engine import make_url

from ..catalog import display_url
from ..catalog.history import Version
from ..errors import BadRequestError, DatasetNotFoundError
from ..reading import Catalog, Dataset
from .config import ServeConfig

__all__ = ["ALL", "Catalogs", "Principal", "parse_version"]

ALL = None
"""A scope of every dataset of the token's catalog."""
_HIDDEN = "<hidden>"
_ROOTS_TTL = 30.0  # seconds the list of dataset roots to scrub is reused


@dataclass(frozen=True, slots=True)
class Principal:
    """Who asks: a token (its catalog, name and scope) or an anonymous client.

    Attributes
    ----------
    caller:
        What the rate limit counts by (``token:ID@catalog`` or ``anon:ADDRESS``).
    catalog:
        The catalog the token belongs to (None: anonymous, every catalog).
    datasets:
        The datasets it may read (None: all of its catalog's).
    """

    caller: str
    catalog: str | None = None
    datasets: frozenset[str] | None = ALL
    name: str | None = None

    @property
    def unscoped(self) -> bool:
        """May read every dataset of its catalog (and run SQL there)."""
        return self.datasets is None

    def sees_catalog(self, catalog: str) -> bool:
        return self.catalog is None or self.catalog == catalog

    def sees(self, catalog: str, dataset: str) -> bool:
        return self.sees_catalog(catalog) and (self.datasets is None or dataset in self.datasets)


def _not_found(name: str) -> DatasetNotFoundError:
    return DatasetNotFoundError(
        f"no dataset {name[:255]!r} here (or not for this token); "
        "GET /api/v1/datasets lists the datasets it may read"
    )


def parse_version(value: str | None) -> Version:
    """``?version=``: a number (``12``) or a tag (``v1``); empty or absent: the latest.

    Raises
    ------
    BadRequestError
        If the value is over 255 characters.
    """
    if value is None or value == "":
        return None
    if len(value) > 255:
        raise BadRequestError("version must be a number or a tag of at most 255 characters")
    return int(value) if value.isdigit() else value


class Catalogs:
    """The named catalogs of a configuration, each opened on first use."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.names = tuple(name for name, _ in config.catalogs)
        self._urls = dict(config.catalogs)
        self._open: dict[str, Catalog] = {}
        self._lock = threading.Lock()
        self._roots: tuple[float, tuple[str, ...]] = (0.0, ())

    @property
    def default(self) -> str:
        return self.names[0]

    def get(self, name: str) -> Catalog:
        """The catalog named ``name``, opened once for the process.

        Raises
        ------
        CatalogError, SchemaVersionError
            If it cannot be opened (an old schema: run ``shardcat catalog upgrade``).
        """
        cat = self._open.get(name)
        if cat is None:
            with self._lock:
                cat = self._open.get(name)
                if cat is None:
                    cat = Catalog(
                        self._urls[name],
                        storage_options=self.config.storage_options,
                        create=False,
                    )
                    self._open[name] = cat
        return cat

    def choose(self, who: Principal, name: str | None) -> str:
        """The catalog ``?catalog=`` names (default: the token's own, else the first).

        Raises
        ------
        DatasetNotFoundError
            If there is no such catalog, or the token is not of it (404: existence is not told).
        """
        if name is None or name == "":
            return who.catalog or self.default
        if name not in self._urls or not who.sees_catalog(name):
            raise DatasetNotFoundError(f"no catalog {name[:100]!r} here")
        return name

    def dataset(self, who: Principal, catalog: str, name: str) -> Dataset:
        """The handle of dataset ``name`` of ``catalog`` if ``who`` may read it (one query).

        Raises
        ------
        DatasetNotFoundError
            If it does not exist or ``who`` may not see it: the same message either way.
        """
        cat = self.reader(who, catalog, name)
        with self.hiding(name):
            return cat.dataset(name)

    def reader(self, who: Principal, catalog: str, name: str) -> Catalog:
        """The catalog to read dataset ``name`` from, if ``who`` may (no query: lookups
        check the dataset themselves; wrap them in :meth:`hiding`).

        Raises
        ------
        DatasetNotFoundError
            If ``who`` may not see it (the message of a dataset that does not exist).
        """
        if not who.sees(catalog, name):
            raise _not_found(name)
        return self.get(catalog)

    @staticmethod
    @contextmanager
    def hiding(name: str) -> Iterator[None]:
        """Re-raise a missing dataset with the message of one the caller may not see.

        The catalog's own message lists the other datasets' names.
        """
        try:
            yield
        except DatasetNotFoundError:
            raise _not_found(name) from None

    def scrub(self, text: str) -> str:
        """``text`` with every dataset root and catalog URL of this server replaced by ``<hidden>``."""
        for secret in self._secrets():
            if secret in text:
                text = text.replace(secret, _HIDDEN)
        return text

    def _secrets(self) -> tuple[str, ...]:
        at, roots = self._roots
        now = time.monotonic()
        if now - at > _ROOTS_TTL:
            found: set[str] = set()
            for name, url in self._urls.items():
                found.update((url, display_url(url)))
                # A SQLite catalog's file as the database names it (pragma_database_list).
                database = make_url(url).database
                if make_url(url).get_backend_name() == "sqlite" and database:
                    found.update((database, os.path.realpath(database), os.path.abspath(database)))
                try:
                    infos = self.get(name).datasets()
                except Exception:  # a catalog that cannot answer hides its URL still
                    continue
                for info in infos:
                    root = info.root_url.rstrip("/")
                    if root:
                        found.add(root)
                        # file:// and bare paths name the same folder
                        found.add(root.removeprefix("file://"))
            # Longest first: a root inside another's text is replaced whole.
            roots = tuple(sorted((s for s in found if len(s) > 1), key=len, reverse=True))
            self._roots = (now, roots)
        return roots

    def close(self) -> None:
        """Close every catalog opened."""
        with self._lock:
            for cat in self._open.values():
                cat.close()
            self._open.clear()
