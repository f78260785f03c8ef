"""Lance (``pylance``) with a BTREE scalar index on the key, as its docs recommend for lookups.

Written with ``lance.write_dataset`` from a stream of Arrow record batches
(``max_bytes_per_file`` = 64 MiB, the shard size of every system); point and
batch lookups are filtered scans (``key = ...``, ``key IN (...)``) that the
scalar index answers; streaming is ``to_batches``. Building the index is
timed as its registration. On S3 it uses Lance's own object-store client
(``aws_endpoint``, ``allow_http``), not s3fs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from benchmarks.peers.base import SHARD_BYTES, Pair, System

BATCH_ROWS = 4096


class Lance(System):
    name = "lance"
    distributions = ("pylance", "pyarrow")

    @classmethod
    def available(cls) -> str | None:
        try:
            import lance  # noqa: F401
        except ImportError as e:
            return f"pylance does not import: {e}"
        return None

    def _options(self) -> dict[str, str] | None:
        if self.store.kind == "local":
            return None
        return {
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
            "aws_endpoint": self.store.endpoint,
            "aws_region": "us-east-1",
            "allow_http": "true",
        }

    def write(self) -> None:
        import lance
        import pyarrow as pa

        schema = pa.schema([("key", pa.string()), ("payload", pa.binary()), ("label", pa.binary())])

        def batches() -> Iterator[pa.RecordBatch]:
            keys: list[str] = []
            payloads: list[bytes] = []
            labels: list[bytes] = []
            for s in self.dataset:
                keys.append(s.key)
                payloads.append(s.payload)
                labels.append(s.label)
                if len(keys) == BATCH_ROWS:
                    yield pa.RecordBatch.from_arrays([keys, payloads, labels], schema=schema)
                    keys, payloads, labels = [], [], []
            if keys:
                yield pa.RecordBatch.from_arrays([keys, payloads, labels], schema=schema)

        reader = pa.RecordBatchReader.from_batches(schema, batches())
        lance.write_dataset(
            reader, self.root, max_bytes_per_file=SHARD_BYTES, storage_options=self._options()
        )
        ds = lance.dataset(self.root, storage_options=self._options())
        t = time.perf_counter()
        ds.create_scalar_index("key", index_type="BTREE")
        self.registration_seconds = time.perf_counter() - t

    def open(self) -> None:
        import lance

        self.ds: Any = lance.dataset(self.root, storage_options=self._options())
        self.notes.append(
            "filtered scans on a BTREE scalar index; registration = building the index"
        )

    def get(self, key: str) -> Pair:
        t = self.ds.to_table(columns=["payload", "label"], filter=f"key = '{key}'")
        return t.column(0)[0].as_py(), t.column(1)[0].as_py()

    def get_many(self, keys: list[str]) -> list[Pair]:
        quoted = ", ".join(f"'{k}'" for k in keys)
        t = self.ds.to_table(columns=["key", "payload", "label"], filter=f"key IN ({quoted})")
        found = {
            k: (p, lab)
            for k, p, lab in zip(
                t.column(0).to_pylist(), t.column(1).to_pylist(), t.column(2).to_pylist()
            )
        }
        return [found[k] for k in keys]

    def stream(self) -> Iterator[tuple[str, bytes | memoryview, bytes | memoryview]]:
        for batch in self.ds.to_batches(columns=["key", "payload", "label"]):
            yield from zip(
                batch.column(0).to_pylist(),
                batch.column(1).to_pylist(),
                batch.column(2).to_pylist(),
            )
