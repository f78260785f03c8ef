"""Generate ``notebooks/quickstart.ipynb`` (without outputs) from the cells below.

The notebook's source lives here so that it can be reviewed as Python; edit
the cells, then run::

    .venv/bin/python notebooks/make_quickstart.py

``tests/test_notebook.py`` executes the notebook top to bottom and checks
that the committed file is exactly what this script writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
NOTEBOOK = HERE / "quickstart.ipynb"

# (cell id, kind, source). Ids are fixed so that regenerating the notebook is
# reproducible and the test can find cells by id.
CELLS: list[tuple[str, str, str]] = [
    (
        "intro",
        "markdown",
        """\
# shardcat quickstart

shardcat writes a dataset as numbered binary shard files into any fsspec store
(a local folder here; `s3://...`, `gs://...` work the same) with Dask, and
registers every record in a SQL catalog (SQLite here, PostgreSQL for teams).
Any sample is then found by its key with **one SQL query plus one ranged read**.

This notebook:

1. makes 2,000 samples from a real photograph (a PNG crop, a JSON label and a small array each),
2. writes them with a local Dask cluster into ~1 MB shards and a SQLite catalog,
3. queries the catalog with plain SQL into pandas DataFrames,
4. looks samples up by key, one at a time and in a batch, and shows their images,
5. plots the shard sizes and the latency of 200 point lookups,
6. streams the dataset back as a Dask bag and verifies every shard against the catalog.

It runs in well under a minute on a laptop. To run the same against S3, PostgreSQL
and a Dask cluster, see `docs/CLUSTER.md`.""",
    ),
    (
        "imports",
        "code",
        """\
%matplotlib inline

import io
import os
import random
import shutil
import tempfile
import time

import dask.bag as db
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from distributed import Client, LocalCluster
from IPython.display import Image, display
from matplotlib import cbook
from matplotlib.patches import Patch

import shardcat
from shardcat.demo import make_png
from shardcat.orchestration import WriteProgress

print("shardcat", shardcat.__version__)""",
    ),
    (
        "samples-md",
        "markdown",
        """\
## 1. Some samples

A sample is a dict: its key under `"__key__"`, and one entry per name. The
entry's name says how it is stored: `png` bytes as `image/png`, a `json` value
as JSON, a NumPy array under `npy` in `.npy` format.

The images are real: 48×48 crops of the portrait of Grace Hopper that ships
with matplotlib's sample data, each saved as a PNG. Its key starts with the
part of the portrait the crop comes from (a 3×3 grid, e.g.
`middle-center/000042`), its JSON holds the crop's position, and its array the
crop's mean colour.""",
    ),
    (
        "samples",
        "code",
        """\
# A photograph that ships with matplotlib: (600, 512, 3) uint8.
photo = plt.imread(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))
SIZE = 48
ROWS, COLUMNS = ["top", "middle", "bottom"], ["left", "center", "right"]


def crops(count: int, seed: int = 0) -> list[dict]:
    \"\"\"``count`` samples, each a random crop of the photograph.\"\"\"
    rng = np.random.default_rng(seed)
    height, width = photo.shape[:2]
    out = []
    for i in range(count):
        y, x = int(rng.integers(0, height - SIZE)), int(rng.integers(0, width - SIZE))
        crop = np.ascontiguousarray(photo[y : y + SIZE, x : x + SIZE])
        cy, cx = y + SIZE // 2, x + SIZE // 2
        region = f"{ROWS[3 * cy // height]}-{COLUMNS[3 * cx // width]}"
        out.append(
            {
                "__key__": f"{region}/{i:06d}",
                "png": make_png(SIZE, SIZE, crop),
                "json": {"region": region, "y": y, "x": x, "index": i},
                "npy": crop.reshape(-1, 3).mean(axis=0).astype(np.float32),
            }
        )
    return out


data = crops(2000)
first = data[0]
print(f"{len(data):,} samples, e.g. {first['__key__']!r}:")
print("  png:", len(first["png"]), "bytes")
print("  json:", first["json"])
print("  npy:", first["npy"].dtype, first["npy"].shape)""",
    ),
    (
        "cluster-md",
        "markdown",
        """\
## 2. A Dask cluster

Two worker processes on this machine. On a real cluster, connect to its
scheduler instead: `client = Client("tcp://scheduler:8786")`.""",
    ),
    (
        "cluster",
        "code",
        """\
cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
client = Client(cluster)
print(client)""",
    ),
    (
        "write-md",
        "markdown",
        """\
## 3. Write the dataset

`shardcat.write` runs one task per partition of the bag. Each task writes its
partition's shards (a new one every `shard_size`) and stages their records in
the catalog; when every task has succeeded, the job is committed in one
transaction, and only then do lookups see the records. `mode="overwrite"` lets
you rerun the cell: the new job replaces the dataset's records when it commits.

`progress=` takes a function, called after each partition with a
`WriteProgress` (partitions done of the total, records, bytes, seconds);
`progress=True` draws a progress bar in a terminal instead.

The shards and the SQLite catalog go into a temporary folder.""",
    ),
    (
        "write",
        "code",
        """\
root = tempfile.mkdtemp(prefix="shardcat-quickstart-")
url = f"sqlite:///{os.path.join(root, 'catalog.db')}"


def show(p: WriteProgress) -> None:
    print(f"  {p.done_partitions}/{p.total_partitions} partitions, {p.records:,} records")


summary = shardcat.write(
    db.from_sequence(data, npartitions=4),
    os.path.join(root, "quickstart"),
    catalog=url,
    dataset="quickstart",
    shard_size="1MB",
    mode="overwrite",
    client=client,
    progress=show,
)
print(summary)
print("catalog:", url)""",
    ),
    (
        "sql-md",
        "markdown",
        """\
## 4. The catalog is SQL

`shardcat.Catalog(url)` opens the catalog; its SQLAlchemy engine is
`cat.engine`, so pandas can query it directly. One row per shard (tables
`datasets`, `jobs`, `shards`, `records`; see `docs/CATALOG.md` for the schema
and more queries):""",
    ),
    (
        "sql-shards",
        "code",
        """\
cat = shardcat.Catalog(url)

shards = pd.read_sql(
    \"\"\"
    SELECT s.shard_number, s.url, s.record_count, s.size_bytes, s.state
    FROM shards s JOIN datasets d ON d.id = s.dataset_id
    WHERE d.name = 'quickstart' AND s.state = 'committed'
    ORDER BY s.shard_number
    \"\"\",
    cat.engine,
)
shards["file"] = shards["url"].map(os.path.basename)
shards[["shard_number", "file", "record_count", "size_bytes", "state"]]""",
    ),
    (
        "sql-labels-md",
        "markdown",
        """\
One row per record: how many samples per region (the part of the key before
the `/`; on PostgreSQL write `split_part(r.key, '/', 1)`):""",
    ),
    (
        "sql-labels",
        "code",
        """\
labels = pd.read_sql(
    \"\"\"
    SELECT substr(r.key, 1, instr(r.key, '/') - 1) AS region, count(*) AS samples
    FROM records r JOIN shards s ON s.id = r.shard_id
    WHERE r.dataset_id = (SELECT id FROM datasets WHERE name = 'quickstart')
      AND s.state = 'committed'
    GROUP BY region
    ORDER BY samples DESC, region
    \"\"\",
    cat.engine,
)
assert labels["samples"].sum() == len(data) == shards["record_count"].sum()
labels""",
    ),
    (
        "lookup-md",
        "markdown",
        """\
## 5. Look samples up by key

`cat.get` finds the record's shard, offset and length with one indexed query,
then reads just those bytes. A record is a read-only mapping of entry names to
entries (`dict(rec)`, `rec.items()`); entries come back as raw bytes (`.data`)
and decode by content type (`.decode()`). A `.npy` entry decodes to a read-only
array that views the bytes read; `.decode(writable=True)` gives a writable copy
(what `torch.from_numpy` wants).""",
    ),
    (
        "lookup",
        "code",
        """\
key = data[123]["__key__"]
rec = cat.get("quickstart", key)
print(rec)
print("entries:", list(rec))
print("json:", rec["json"].decode())
print("npy: ", rec["npy"].decode(), "(mean colour)")
display(Image(rec["png"].data, width=128))""",
    ),
    (
        "batch-md",
        "markdown",
        """\
`cat.get_many` looks up many keys with one query and coalesced reads, in input
order; missing keys are reported in `batch.missing`, never dropped. Here the
PNG bytes are decoded with matplotlib:""",
    ),
    (
        "batch",
        "code",
        """\
keys = [s["__key__"] for s in random.Random(1).sample(data, 8)] + ["no/such-key"]
batch = cat.get_many("quickstart", keys)
print("missing:", batch.missing)

found = batch.found()
fig, axes = plt.subplots(1, len(found), figsize=(12, 2))
for ax, (k, r) in zip(axes, found.items()):
    ax.imshow(plt.imread(io.BytesIO(r["png"].data), format="png"))
    ax.set_title(k, fontsize=8)
    ax.axis("off")
plt.show()""",
    ),
    (
        "shard-sizes-md",
        "markdown",
        """\
The shards by size. Each of the 4 partitions is written by one task, which
starts a new shard whenever the current one reaches `shard_size` (1 MB). So
every partition ends with a smaller **tail shard**: it holds what was left of
the partition after its full shards (here each partition holds about 2.6 MB
of samples: two full shards and a tail). Shard numbers are
`partition × 1000 + shard of the partition`; the tail shards are drawn in
orange.""",
    ),
    (
        "shard-sizes",
        "code",
        """\
partition = shards["shard_number"] // 1000
tail = shards["shard_number"] == shards.groupby(partition)["shard_number"].transform("max")
fig, ax = plt.subplots(figsize=(10, 3))
colors = np.where(tail, "tab:orange", "tab:blue")
ax.bar(shards["shard_number"].astype(str), shards["size_bytes"] / 1e6, color=colors)
limit = ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="shard_size (1 MB)")
handles = [
    limit,
    Patch(color="tab:blue", label="full shard: rolled over at shard_size"),
    Patch(color="tab:orange", label="tail shard: the rest of its partition"),
]
ax.set_ylim(0, 1.6 * shards["size_bytes"].max() / 1e6)
ax.set_xlabel("shard number (partition × 1000 + shard of the partition)")
ax.set_ylabel("size (MB)")
ax.set_title(f"{len(shards)} shards, {shards['record_count'].sum():,} records")
ax.legend(handles=handles, loc="upper right", fontsize=8)
plt.show()
# Every full shard reached shard_size; every tail shard is smaller.
sizes = shards["size_bytes"]
assert (sizes[~tail] >= 1e6).all() and (sizes[tail] < 1e6).all()
print(f"{(~tail).sum()} full shards, {tail.sum()} tail shards (one per partition)")""",
    ),
    (
        "latency-md",
        "markdown",
        """\
## 6. Lookup latency

200 point lookups of random keys, each timed on its own (one SQL query plus
one ranged read of a local file), after one untimed warm-up lookup (the first
lookup opens the database connection and compiles the query):""",
    ),
    (
        "latency",
        "code",
        """\
picked = random.Random(0).sample([s["__key__"] for s in data], 201)
cat.get("quickstart", picked.pop())  # warm-up, not timed
latencies_us = []
for k in picked:
    t0 = time.perf_counter()
    cat.get("quickstart", k)
    latencies_us.append(1e6 * (time.perf_counter() - t0))
latencies = pd.Series(latencies_us, name="latency (µs)")

fig, ax = plt.subplots(figsize=(8, 3))
ax.hist(latencies, bins=np.geomspace(latencies.min(), latencies.max(), 40))
ax.set_xscale("log")
median, p90 = latencies.median(), latencies.quantile(0.9)
ax.axvline(median, color="black", linestyle="--", linewidth=1, label=f"median {median:.0f} µs")
ax.axvline(p90, color="grey", linestyle=":", linewidth=1, label=f"90th percentile {p90:.0f} µs")
ax.set_title(f"{len(latencies)} point lookups with cat.get: median {median:.0f} µs")
ax.set_xlabel("latency of cat.get (µs, log scale)")
ax.set_ylabel("lookups")
ax.legend()
print(f"median latency: {median:.0f} µs")
plt.show()
latencies.describe(percentiles=[0.5, 0.9, 0.99]).round(1).to_frame()""",
    ),
    (
        "stream-md",
        "markdown",
        """\
## 7. Stream it back, verify it

`shardcat.read` returns the committed records as a Dask bag with one partition
per shard (it runs on the current client, i.e. the workers). `cat.verify`
reads every shard, checks every CRC and compares each record with the catalog.""",
    ),
    (
        "stream",
        "code",
        """\
streamed = shardcat.read(cat, "quickstart").count().compute()
print(f"streamed {streamed:,} samples")
assert streamed == len(data)""",
    ),
    (
        "torch-md",
        "markdown",
        """\
A PyTorch `DataLoader` streams the same shards (`shardcat.torch`, the `torch`
extra): shards shuffled per epoch by a seed, split over the loader's workers,
every sample once per epoch; `where=` picks samples with SQL over the catalog
(here one region, by key prefix). See `docs/TRAINING.md` for a training loop,
resuming mid-epoch and `KeyDataset`.""",
    ),
    (
        "torch",
        "code",
        """\
from torch.utils.data import DataLoader

from shardcat.torch import ShardIterableDataset

train = ShardIterableDataset(cat, "quickstart", entries=["npy"], seed=0, where="key LIKE 'top-%'")
loader = DataLoader(train, batch_size=64, num_workers=2)
colours = [batch["npy"] for batch in loader]
print(f"{len(colours)} batches of mean colours, {sum(len(c) for c in colours)} samples")
assert sum(len(c) for c in colours) == sum(s["__key__"].startswith("top-") for s in data)""",
    ),
    (
        "verify",
        "code",
        """\
report = cat.verify("quickstart")
print(report)
assert report.ok""",
    ),
    (
        "cleanup-md",
        "markdown",
        """\
## 8. Clean up

Close the catalog and the cluster, and remove the temporary folder (keep it
to explore the dataset with the CLI, e.g.
`shardcat --catalog sqlite:///<folder>/catalog.db ls quickstart`).""",
    ),
    (
        "cleanup",
        "code",
        """\
cat.close()
client.close()
cluster.close()
shutil.rmtree(root)""",
    ),
]


def build() -> nbformat.NotebookNode:
    """The quickstart notebook, without outputs."""
    nb = new_notebook()
    nb.metadata = {
        "kernelspec": {
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
            "name": "python3",
        },
        "language_info": {"name": "python"},
    }
    for cell_id, kind, source in CELLS:
        cell = new_code_cell(source) if kind == "code" else new_markdown_cell(source)
        cell.id = cell_id
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def render() -> str:
    """The notebook file's text, as committed."""
    return nbformat.writes(build()) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--check"]:
        if NOTEBOOK.read_text(encoding="utf-8") != render():
            print(f"{NOTEBOOK} is out of date: run python {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    NOTEBOOK.write_text(render(), encoding="utf-8")
    print(f"wrote {NOTEBOOK}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
