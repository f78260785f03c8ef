"""One bad sample (an empty ``.json`` beside its image) must not kill a training run.

The user's story (issue 37, item 1): ``shardcat write … --skip-unmatched``
packed a 0-byte ``empty.json`` silently, and iterating the dataset later died
with a bare ``json.decoder.JSONDecodeError`` naming no key, entry or shard.
Now the write refuses the sample, naming the file; a dataset that holds such
a sample anyway (written by ``ShardWriter``, by an older shardcat, or a tar
indexed in place) raises :class:`SampleDecodeError` naming the dataset, key,
entry and shard, and the readers can drop such samples (``on_error``),
counting them. Every test runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
from typing import Any

import numpy as np
import pytest

import shardcat
from _forkrun import Call, completed
from shardcat.errors import (
    DatasetNotFoundError,
    KeyNotFoundError,
    SampleDecodeError,
)
from shardcat.readers import pack_samples
from shardcat.reading import Catalog

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from shardcat.torch import MixedDataset, ShardIterableDataset  # noqa: E402

from .badsamples import (  # noqa: E402
    BAD,
    GOOD,
    JPEG,
    assert_names_the_sample,
    keys_of,
    label,
    tar_dataset_with_an_empty_json,
)

# --- the user's story, through the command line ------------------------------


def shardcat_cli(*args: str) -> Any:
    """``shardcat ARGS`` as a user runs it (forked from a process that imported shardcat)."""
    env = {k: v for k, v in os.environ.items() if k not in ("SHARDCAT_CATALOG", "SHARDCAT_CONFIG")}
    env.update({"COLUMNS": "250", "NO_COLOR": "1"})
    return completed([Call(list(args), env, os.getcwd(), timeout=180, stdin=b"")])[0]


def test_write_refuses_an_empty_json_beside_its_image_then_packs_the_fixed_folder(
    catalog_url, tmp_path
):
    src = tmp_path / "photos"
    (src / "cats").mkdir(parents=True)
    for i in range(6):
        (src / "cats" / f"img{i}.jpg").write_bytes(JPEG + bytes([i]))
        (src / "cats" / f"img{i}.json").write_bytes(label(i))
    (src / "cats" / "empty.jpg").write_bytes(JPEG)
    (src / "cats" / "empty.json").write_bytes(b"")
    (src / "README").write_text("no extension: skipped on request")
    root = str(tmp_path / "shards")
    write = ("--catalog", catalog_url, "write", str(src), root, "-d", "imgs")
    opts = ("--workers", "1", "--skip-unmatched", "--no-progress")

    p = shardcat_cli(*write, *opts)
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    assert (
        "refusing to write dataset 'imgs', key 'cats/empty', entry 'json' (application/json) "
        f"from file file://{src}/cats/empty.json: it would not decode: it is empty (0 bytes)"
    ) in p.stderr
    assert "fix or remove that file" in p.stderr
    with Catalog(catalog_url) as cat, pytest.raises((KeyNotFoundError, DatasetNotFoundError)):
        cat.get("imgs", "cats/img0")  # nothing of the job was committed

    (src / "cats" / "empty.json").write_bytes(b'{"label": 9}')
    p = shardcat_cli(*write, *opts)
    assert p.returncode == 0, p.stderr
    ds = ShardIterableDataset(catalog_url, "imgs", shuffle=False)
    samples = {s["__key__"]: s for s in ds}
    assert sorted(samples) == ["cats/empty"] + [f"cats/img{i}" for i in range(6)]
    assert samples["cats/empty"]["json"] == {"label": 9}
    assert ds.skipped == 0


# --- reading a dataset that holds bad samples --------------------------------


def test_get_and_decode_name_the_dataset_key_entry_and_shard(bad_dataset):
    with Catalog(bad_dataset) as cat:
        record = cat.get("imgs", "k07")
        with pytest.raises(SampleDecodeError) as e:
            record["json"].decode()  # a lone entry: typed, with the reason (it holds no key)
        assert "it is empty (0 bytes), not a JSON value" in str(e.value)
        with pytest.raises(SampleDecodeError) as e:
            record.decode()
        assert_names_the_sample(e.value, dataset=None)
        assert "it is empty (0 bytes), not a JSON value" in str(e.value)
        with pytest.raises(SampleDecodeError) as e:
            cat.get("imgs", "k23").decode()
        assert_names_the_sample(e.value, "k23", dataset=None)
        assert "its 11 bytes are not valid JSON" in str(e.value)
        # The rest of the record, and other records, read as before.
        assert record["jpg"].data == JPEG
        assert cat.get("imgs", "k08")["json"].decode() == {"label": 0}
        # A batch lookup's records name their key and shard too.
        batch = cat.get_many("imgs", ["k06", "k07"])
        assert batch[0] is not None and batch[0].decode()["json"] == {"label": 2}
        with pytest.raises(SampleDecodeError) as e:
            batch[1].decode()
        assert (e.value.key, e.value.entry) == ("k07", "json")
        assert e.value.path is not None and e.value.path.endswith("imgs-000000.shard")


def test_the_error_crosses_processes_whole():
    e = SampleDecodeError(
        "it is empty (0 bytes), not a JSON value",
        content_type="application/json",
        dataset="imgs",
        key="k07",
        entry="json",
        path="s3://bucket/imgs-000000.shard",
    )
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is SampleDecodeError and str(back) == str(e)
    assert (back.dataset, back.key, back.entry, back.path) == (
        "imgs",
        "k07",
        "json",
        "s3://bucket/imgs-000000.shard",
    )


@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffled", "file-order"])
def test_iterating_raises_the_typed_error_by_default(bad_dataset, shuffle):
    ds = ShardIterableDataset(bad_dataset, "imgs", shuffle=shuffle)
    with pytest.raises(SampleDecodeError) as e:
        list(ds)
    assert e.value.key in BAD
    assert_names_the_sample(e.value, e.value.key)


@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffled", "file-order"])
@pytest.mark.parametrize("on_error", ["skip", "log"])
def test_skip_and_log_drop_the_bad_samples_and_count_them(bad_dataset, shuffle, on_error, caplog):
    ds = ShardIterableDataset(bad_dataset, "imgs", shuffle=shuffle, on_error=on_error)
    with caplog.at_level(logging.WARNING, logger="shardcat"):
        samples = list(ds)
    assert keys_of(samples) == GOOD
    assert all(s["json"] == {"label": int(s["__key__"][1:]) % 4} for s in samples)
    assert ds.skipped == 2 and ds.state_dict()["skipped"] == 2
    warned = [r.getMessage() for r in caplog.records if "skipped a sample" in r.getMessage()]
    if on_error == "log":
        assert len(warned) == 2
        assert any("key 'k07', entry 'json'" in w and "imgs-000000.shard" in w for w in warned)
    else:
        assert warned == []
    list(ds)  # the count is of every epoch read
    assert ds.skipped == 4


def test_workers_skip_and_the_count_reaches_the_training_process(bad_dataset):
    ds = ShardIterableDataset(bad_dataset, "imgs", on_error="skip", shuffle_buffer=8)
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    assert keys_of(loader) == GOOD
    assert ds.skipped == 2


@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffled", "file-order"])
def test_packed_batches_raise_or_drop_the_bad_samples(bad_dataset, shuffle):
    ds = ShardIterableDataset(
        bad_dataset, "imgs", shuffle=shuffle, batch_size=8, collate=pack_samples
    )
    with pytest.raises(SampleDecodeError) as e:
        list(ds)
    assert (e.value.dataset, e.value.entry) == ("imgs", "json") and e.value.key in BAD
    ds = ShardIterableDataset(
        bad_dataset, "imgs", shuffle=shuffle, batch_size=8, collate=pack_samples, on_error="skip"
    )
    batches = list(ds)
    assert sorted(k for b in batches for k in b.keys) == GOOD
    assert ds.skipped == 2


def test_resuming_after_a_skipped_sample_yields_the_rest_exactly_once(bad_dataset):
    ds = ShardIterableDataset(bad_dataset, "imgs", on_error="skip", shuffle_buffer=8, seed=3)
    first: list[str] = []
    for sample in ds:
        first.append(sample["__key__"])
        if ds.skipped == 1 and len(first) >= 10:
            break
    state = ds.state_dict()
    again = ShardIterableDataset(bad_dataset, "imgs", on_error="skip", shuffle_buffer=8, seed=3)
    again.load_state_dict(state)
    rest = [s["__key__"] for s in again]
    assert sorted(first + rest) == GOOD
    assert again.skipped == 2 - state["skipped"]


def test_a_tar_indexed_in_place_with_an_empty_json(catalog_url, tmp_path):
    """A WebDataset tar is never written by shardcat, so no write checked it: the readers must cope."""
    tar_dataset_with_an_empty_json(catalog_url, tmp_path / "wds")
    with Catalog(catalog_url) as cat:
        with pytest.raises(SampleDecodeError) as e:
            cat.get("wds", "t/s05")["json"].decode()
        with pytest.raises(SampleDecodeError) as e:
            cat.get("wds", "t/s05").decode()
        assert (e.value.key, e.value.entry) == ("t/s05", "json")
    for shuffle in (True, False):
        with pytest.raises(SampleDecodeError) as e:
            list(ShardIterableDataset(catalog_url, "wds", shuffle=shuffle))
        assert (e.value.dataset, e.value.key, e.value.entry) == ("wds", "t/s05", "json")
        assert e.value.path is not None and e.value.path.endswith("part-000000.tar")
    ds = ShardIterableDataset(catalog_url, "wds", on_error="skip")
    assert keys_of(ds) == [f"t/s{i:02d}" for i in range(12) if i != 5]
    assert ds.skipped == 1


def test_shards_on_s3_are_named_by_their_url(catalog_url, s3):
    root = f"{s3['url']}/imgs"
    opts = s3["storage_options"]
    with Catalog(catalog_url, storage_options=opts) as cat:
        cat.create_dataset("imgs", root)
        with shardcat.ShardWriter(f"{root}/imgs-000000.shard", storage_options=opts) as w:
            for i in range(6):
                w.add(f"k{i:02d}", {"jpg": JPEG, "json": b"" if i == 2 else label(i)})
        cat.register_shard("imgs", w.close())
        with pytest.raises(SampleDecodeError) as e:
            cat.get("imgs", "k02").decode()
        assert e.value.path == f"{root}/imgs-000000.shard"
        assert f"key 'k02', entry 'json', shard {root}/imgs-000000.shard" in str(e.value)
        assert "testing" not in str(e.value)  # never a credential
    ds = ShardIterableDataset(catalog_url, "imgs", storage_options=opts, on_error="skip")
    assert keys_of(ds) == ["k00", "k01", "k03", "k04", "k05"] and ds.skipped == 1
    with pytest.raises(SampleDecodeError) as e:
        list(ShardIterableDataset(catalog_url, "imgs", storage_options=opts))
    assert e.value.path == f"{root}/imgs-000000.shard" and e.value.dataset == "imgs"


def test_a_mix_passes_over_what_its_datasets_drop(bad_dataset):
    parts = [
        (ShardIterableDataset(bad_dataset, "imgs", on_error="skip", seed=s), None) for s in (0, 1)
    ]
    mix = MixedDataset(parts, seed=5)
    assert keys_of(mix) == sorted(GOOD * 2)
    assert mix.skipped == 4


def test_on_error_must_be_one_of_the_three(bad_dataset):
    with pytest.raises(ValueError, match="on_error must be one of 'raise', 'skip', 'log'"):
        ShardIterableDataset(bad_dataset, "imgs", on_error="ignore")  # type: ignore[arg-type]


# --- write-time validation, through the Python API ---------------------------


def _npy(array: np.ndarray) -> bytes:

    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("json", b"", "it is empty (0 bytes), not a JSON value"),
        ("meta.json", b"{'single': 'quotes'}", "are not valid JSON"),
        ("txt", b"caf\xe9", "are not valid utf-8 text"),
        ("npy", b"\x93NUMPY\x01\x00" + b"\x00" * 40, "not a .npy array"),
        ("json", shardcat.Entry(b"nope", "application/json"), "are not valid JSON"),
    ],
)
def test_the_python_writer_refuses_an_entry_that_would_not_decode(
    catalog_url, tmp_path, name, value, reason
):
    def write() -> None:
        with shardcat.DatasetWriter(catalog_url, "imgs", str(tmp_path / "shards")) as w:
            w.write({"__key__": "a", "jpg": JPEG, "json": label(1)})
            w.write({"__key__": "b", "jpg": JPEG, name: value})

    with pytest.raises(SampleDecodeError) as e:
        write()
    assert e.value.writing and (e.value.dataset, e.value.key, e.value.entry) == ("imgs", "b", name)
    assert reason in str(e.value) and "nothing of this job was committed" in str(e.value)
    with Catalog(catalog_url) as cat, pytest.raises((KeyNotFoundError, DatasetNotFoundError)):
        cat.get("imgs", "a")


def test_the_python_writer_stores_what_decodes_as_given(catalog_url, tmp_path):
    good = {
        "__key__": "a",
        "jpg": b"",  # not a type the decoders parse: stored as given
        "json": b'{"label": 1}',
        "txt": "caf\u00e9".encode(),
        "npy": _npy(np.arange(3)),
        "cls": {"any": ["json", "value"]},  # encoded by shardcat: decodes by construction
    }
    with shardcat.DatasetWriter(catalog_url, "imgs", str(tmp_path / "shards")) as w:
        w.write(good)
        w.add("b", {"json": b"[]"})
    with Catalog(catalog_url) as cat:
        got = cat.get("imgs", "a").decode()
        assert got["json"] == {"label": 1} and got["txt"] == "caf\u00e9"
        assert got["npy"].tolist() == [0, 1, 2] and got["jpg"] == b""
        assert cat.get("imgs", "b")["json"].decode() == []
