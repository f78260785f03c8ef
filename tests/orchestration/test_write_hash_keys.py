"""shardcat.write(keys="hash") on a real Dask LocalCluster: workers write, the barrier registers.

Hash-only datasets keep no key text in the catalog (docs/CATALOG.md, "Hash-only
datasets"); what the workers wrote is read back exactly, appends find their
duplicates by the keys the shards hold, and the key mode is the dataset's own.
"""

from __future__ import annotations

import dask
import dask.bag as db
import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

import shardcat
from shardcat.cli.app import app
from shardcat.errors import DatasetExistsError, DuplicateKeyError
from shardcat.reading import Catalog

from .samples import make_samples


def _bag(partitions: int, per_partition: int, prefix: str = "s") -> db.Bag:
    return db.from_delayed(
        [dask.delayed(make_samples)(p, per_partition, prefix) for p in range(partitions)]
    )


def test_write_hash_only_then_append_on_both_catalogs(client, tmp_path, catalog_url):
    root = str(tmp_path / "ds")

    def write(data, **kw):
        return shardcat.write(
            data, root, catalog=catalog_url, dataset="h", client=client, progress=False, **kw
        )

    write(_bag(3, 200), keys="hash", shard_size="100KB")
    samples = [s for p in range(3) for s in make_samples(p, 200)]
    with Catalog(catalog_url) as cat:
        assert cat.info("h").keys == "hash"
        with cat.engine.connect() as conn:
            n, texts = conn.execute(sa.text("SELECT count(*), count(key) FROM records")).one()
        assert (n, texts) == (600, 0)
        batch = cat.get_many("h", [s["__key__"] for s in samples])
        assert [r.key for r in batch.records] == [s["__key__"] for s in samples]
        assert all(r["bin"].data == s["bin"] for r, s in zip(batch.records, samples))
        assert cat.get("h", samples[123]["__key__"])["json"].decode() == samples[123]["json"]
    # An append whose keys are new passes the duplicate check; one that repeats a key is named.
    write(_bag(2, 50, prefix="t"), mode="append")
    again = [dict(samples[7], bin=b"newer")]
    with pytest.raises(DuplicateKeyError) as e:
        write(again, mode="append")
    assert e.value.keys == [samples[7]["__key__"]]
    write(again, mode="append", on_duplicate="replace")
    with Catalog(catalog_url) as cat:
        assert cat.get("h", samples[7]["__key__"])["bin"].data == b"newer"
        assert cat.get("h", samples[8]["__key__"])["bin"].data == samples[8]["bin"]
        assert cat.count("h") == 700
    # The mode is the dataset's: asking for the other one is refused, naming it.
    with pytest.raises(DatasetExistsError, match="keeps keys='hash'"):
        write(again, mode="overwrite", keys="text")
    # A value that is no key mode is said as such, not as the other mode.
    with pytest.raises(ValueError, match="keys must be one of"):
        write(again, mode="append", keys="Hash")


def test_a_copy_of_a_hash_only_dataset_has_key_text_again(client, tmp_path, sqlite_url):
    """What KeyTextUnavailableError's hint says: the copy registers keys from the footers."""
    shardcat.write(
        _bag(2, 30), str(tmp_path / "ds"), catalog=sqlite_url, dataset="h", keys="hash",
        client=client, progress=False,
    )  # fmt: skip
    shardcat.copy_dataset(sqlite_url, "h", str(tmp_path / "copy"), name="t", client=client)
    with Catalog(sqlite_url) as cat:
        assert cat.info("t").keys == "text"
        expected = sorted(s["__key__"] for p in range(2) for s in make_samples(p, 30))
        assert list(cat.keys("t")) == expected
        assert cat.get("t", expected[5]).key == expected[5]


def test_a_copy_changes_the_key_mode(client, tmp_path, sqlite_url):
    """copy_dataset(keys=) is how a dataset becomes unsorted or hash-only: rows from footers."""
    from shardcat import KeyOrderUnavailableError

    shardcat.write(
        _bag(2, 30), str(tmp_path / "ds"), catalog=sqlite_url, dataset="t", client=client,
        progress=False,
    )  # fmt: skip
    expected = sorted(s["__key__"] for p in range(2) for s in make_samples(p, 30))
    for mode in ("unsorted", "hash"):
        shardcat.copy_dataset(
            sqlite_url, "t", str(tmp_path / mode), name=mode, client=client, keys=mode
        )
    with Catalog(sqlite_url) as cat:
        assert [cat.info(n).keys for n in ("t", "unsorted", "hash")] == ["text", "unsorted", "hash"]
        with cat.engine.connect() as conn:
            rows = dict(
                conn.execute(
                    sa.text(
                        "SELECT d.name, count(r.key) FROM records r JOIN datasets d "
                        "ON d.id = r.dataset_id WHERE NOT r.key_sorted GROUP BY d.name"
                    )
                ).all()
            )
        assert rows == {"unsorted": 60}  # key text kept, out of the key index
        for name in ("unsorted", "hash"):
            assert [r.key for r in cat.get_many(name, expected).records] == expected
            with pytest.raises(KeyOrderUnavailableError):
                list(cat.keys(name))
    # A move keeps the mode; a value that is no mode is refused before any shard is copied.
    with pytest.raises(ValueError, match="key mode"):
        shardcat.copy_dataset(sqlite_url, "t", str(tmp_path / "m"), move=True, keys="hash")
    with pytest.raises(ValueError, match="keys must be one of"):
        shardcat.copy_dataset(sqlite_url, "t", str(tmp_path / "x"), name="x", keys="sorted")
    assert not (tmp_path / "x").exists()
    # An empty dataset of the copy's name (an interrupted copy's) that keeps keys otherwise
    # is named before any shard is copied; the command passes --keys through.
    with Catalog(sqlite_url) as cat:
        cat.create_dataset("y", str(tmp_path / "y"), keys="hash")
    with pytest.raises(DatasetExistsError, match=r"keeps keys='hash'.*asks for keys='unsorted'"):
        shardcat.copy_dataset(
            sqlite_url, "t", str(tmp_path / "y"), name="y", client=client, keys="unsorted"
        )
    assert not (tmp_path / "y").exists()
    out = CliRunner().invoke(
        app,
        ["--catalog", sqlite_url, "copy", "t", str(tmp_path / "z"), "--as", "z", "--keys",
         "unsorted", "--scheduler", client.scheduler.address, "--no-progress"],
        env={"COLUMNS": "250", "NO_COLOR": "1"},
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    with Catalog(sqlite_url) as cat:
        assert cat.info("z").keys == "unsorted" and cat.count("z") == 60
