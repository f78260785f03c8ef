"""shardcat as its README shows it: a dataset written by ``DatasetWriter``, a SQLite catalog.

The timed write is ``shardcat.DatasetWriter``, the README's way to write a
dataset into a catalog from one Python process: shards published
exclusively (on S3 one conditional PUT per shard, sent while the next shard
is encoded), each staged in the catalog once published, and all committed
as one version when the block ends.

Registration keys/s is measured apart, right after the timed write and
outside it: one ``Catalog.register_shards`` of the same shards into a fresh
catalog, under a dataset name of its own (one transaction, one version: the catalog's bulk path, which the
floor's bare ``executemany`` into the same indexed table is compared with).
Lookups are ``Catalog.get`` and ``Catalog.get_many``; streaming iterates the
shards with ``shardcat.iter_shards`` (each shard's ``ShardReader`` stream,
the next shard opened while one is read, as the README shows for a folder of
shards). Every path hands out each entry's ``Entry.view``: the public
zero-copy bytes of an uncompressed entry, as the floor hands out views of the
bytes it read (its ``get``/``get_many`` return slices of a ``memoryview`` of
each ``os.pread``); ``.data`` would copy every payload into a new ``bytes``
(~30 ms per 10,000 keys of 2-8 KiB here).

The same work is timed on both sides against Lance: each system's timed
write iterates the same Python samples (shardcat's ``add`` loop; Lance's
Arrow batches are built from them inside the clock, by the generator
``write_dataset`` consumes) and includes its catalog or index. One
difference stays, in Lance's favour: shardcat syncs every shard to disk
(``fsync``) before publishing its name, while Lance and the floor never
sync (``strace -f -e fsync,fdatasync`` of a Lance write shows none).

Python imports stay out of the timed write, as ``import lance`` does for
Lance (its ``available``): shardcat imports SQLAlchemy, Alembic (to stamp a
new catalog) and its catalog modules on first use, ~0.4 s of CPU once per
process, which is a third of the whole write at ``--scale 0.1``. So
``available`` writes one record through the same public path into a
temporary folder and an in-memory catalog; the timed write then pays for
everything a long-running writer pays per dataset, including creating its
catalog file and schema.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

from benchmarks.peers.base import SHARD_BYTES, Pair, System


class Shardcat(System):
    name = "shardcat"
    distributions = ("shardcat",)

    @classmethod
    def available(cls) -> str | None:
        import tempfile

        import shardcat

        with tempfile.TemporaryDirectory(prefix="shardcat-warmup-") as tmp:
            with shardcat.DatasetWriter("sqlite://", "warmup", tmp) as w:
                w.add("warm/up", {"bin": b"x", "json": b"{}"})
            infos: list[Any] = []
            with shardcat.RollingShardWriter(tmp, on_shard_closed=infos.append) as rolling:
                rolling.add("warm/up", {"bin": b"x", "json": b"{}"})
            with shardcat.Catalog("sqlite://") as cat:
                cat.create_dataset("registered", tmp)  # not "warmup": its history is there
                cat.register_shards("registered", infos)
        return None

    def write(self) -> None:
        import shardcat

        if self.store.kind == "local":
            os.makedirs(self.root, exist_ok=True)
        self.catalog_url = f"sqlite:///{self.store.local_dir('shardcat')}/catalog.db"
        with shardcat.DatasetWriter(
            self.catalog_url,
            "train",
            self.root,
            shard_size=SHARD_BYTES,
            storage_options=self.store.storage_options or None,
        ) as w:
            for s in self.dataset:
                w.add(s.key, {"bin": s.payload, "json": s.label})
        assert w.summary is not None
        self.urls = list(w.summary.shards)

    def after_write(self) -> None:
        """Registration keys/s: one ``register_shards`` of the same shards into a fresh catalog."""
        import shardcat

        options = self.store.storage_options or None
        infos = []
        for shard in self.urls:
            with shardcat.ShardReader(shard, storage_options=options) as r:
                infos.append(r.info)
        url = f"sqlite:///{self.store.local_dir('shardcat')}/registration.db"
        with shardcat.Catalog(url, storage_options=self.store.storage_options) as cat:
            # A name of its own: registered as "train", its version history would find the
            # written dataset's and set it aside (a HistoryWarning and a move, timed).
            cat.create_dataset("registered", self.root)
            t, cpu = time.perf_counter(), time.process_time()
            cat.register_shards("registered", infos)
            self.registration_seconds = time.perf_counter() - t
            self.registration_cpu_seconds = time.process_time() - cpu

    def open(self) -> None:
        import shardcat

        self.cat = shardcat.Catalog(self.catalog_url, storage_options=self.store.storage_options)

    def get(self, key: str) -> Pair:
        rec = self.cat.get("train", key)
        return rec["bin"].view, rec["json"].view

    def get_many(self, keys: list[str]) -> list[Pair]:
        result = self.cat.get_many("train", keys)
        result.raise_for_missing()
        return [(r["bin"].view, r["json"].view) for r in result.records if r is not None]

    def stream(self) -> Iterator[tuple[str, bytes | memoryview, bytes | memoryview]]:
        import shardcat

        options = self.store.storage_options or None
        for rec in shardcat.iter_shards(self.urls, storage_options=options):
            yield rec.key, rec["bin"].view, rec["json"].view

    def close(self) -> None:
        self.cat.close()
