"""Jobs list their folders' stores before they schedule anything (``orchestration/reach.py``).

A missing bucket, a store that does not answer, or credentials the Dask
workers lack is one typed error before any task runs: counted at a real
moto server (``counting_moto``) as no upload at all, on real LocalClusters
with worker processes.
"""

from __future__ import annotations

import tarfile
from io import BytesIO
from typing import Any

import pytest

import shardcat
from _servers import counting_moto, moto_client, requests_seen, silent_store
from shardcat.errors import BucketNotFoundError, StorageCredentialsError, StorageUnreachableError
from shardcat.orchestration.cluster import DaskCluster
from shardcat.storage.preflight import check_folder

pytestmark = pytest.mark.slow


def _options(endpoint: str, **extra: Any) -> dict[str, Any]:
    return {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        "use_listings_cache": False,
        **extra,
    }


def _samples(n: int = 20) -> list[dict[str, Any]]:
    return [{"__key__": f"k/{i:03d}", "txt": f"sample {i}"} for i in range(n)]


def _uploads(endpoint: str) -> list[dict[str, Any]]:
    return [r for r in requests_seen(endpoint) if r["method"] in ("PUT", "POST", "DELETE")]


def test_check_folder_accepts_a_new_folder_of_an_existing_bucket_and_refuses_a_missing_bucket():
    with counting_moto() as endpoint:
        moto_client(endpoint).create_bucket(Bucket="here")
        options = _options(endpoint)
        check_folder("s3://here/not/yet/written", options)  # a new dataset's folder
        with pytest.raises(BucketNotFoundError) as err:
            check_folder("s3://not-here/ds", options)
    assert err.value.bucket == "not-here"
    assert "create it first" in str(err.value)


def test_check_folder_asks_a_bounded_question_of_a_folder_of_many_objects():
    # A listing of this folder takes two pages (S3 answers at most 1,000 keys a page); the
    # preflight runs on the client and on every worker, so it must not grow with the dataset.
    with counting_moto() as endpoint:
        client = moto_client(endpoint)
        client.create_bucket(Bucket="big")
        for i in range(1_001):
            client.put_object(Bucket="big", Key=f"ds/shard-{i:06d}.shard", Body=b"")
        requests_seen(endpoint)  # forget the set-up
        check_folder("s3://big/ds", _options(endpoint))
        asked = requests_seen(endpoint)
        check_folder("s3://big/ds/", _options(endpoint))
        asked_with_slash = requests_seen(endpoint)
    # A HEAD of the folder's own name (no such object) and one listing of at most one key.
    assert [r["method"] for r in asked] == ["HEAD", "GET"], asked
    assert [r["method"] for r in asked_with_slash] == ["HEAD", "GET"], asked_with_slash


def test_check_folder_on_azure_tells_a_new_folder_from_a_missing_container(azure):
    options = azure["storage_options"]
    check_folder(f"{azure['url']}/not/yet/written", options)
    with pytest.raises(BucketNotFoundError) as err:
        check_folder(f"az://{azure['container']}-missing/ds", options)
    assert "container" in str(err.value)


def test_check_folder_asks_nothing_of_local_folders(tmp_path):
    check_folder(str(tmp_path / "missing" / "deeper"))  # created by the writer: nothing to refuse


def test_a_write_into_a_missing_bucket_fails_before_a_cluster_starts(sqlite_url):
    import dask.bag as db

    with counting_moto() as endpoint:
        moto_client(endpoint).create_bucket(Bucket="here")
        requests_seen(endpoint)  # forget the set-up
        with pytest.raises(BucketNotFoundError):
            shardcat.write(
                db.from_sequence(_samples(), npartitions=2),
                "s3://not-here/ds",
                catalog=sqlite_url,
                dataset="ds",
                storage_options=_options(endpoint),
                # A cluster that cannot start (no worker may have 0 threads) would fail
                # otherwise: the refusal comes first.
                client=DaskCluster(scheduler="tcp://127.0.0.1:1"),
                progress=False,
            )
        assert _uploads(endpoint) == []
    with shardcat.Catalog(sqlite_url) as cat:
        assert cat.datasets() == []  # the failed first job left no dataset


def test_a_store_that_does_not_answer_fails_within_the_deadline(sqlite_url, monkeypatch):
    import dask.bag as db

    monkeypatch.setenv("SHARDCAT_STORAGE_RETRY_DEADLINE", "2")
    with silent_store() as endpoint, pytest.raises(StorageUnreachableError) as err:
        shardcat.write(
            db.from_sequence(_samples(), npartitions=1),
            "s3://hung/ds",
            catalog=sqlite_url,
            dataset="ds",
            storage_options=_options(endpoint, config_kwargs={"retries": {"max_attempts": 1}}),
            client=DaskCluster(scheduler="tcp://127.0.0.1:1"),
            progress=False,
        )
    assert "check the endpoint" in str(err.value)


def _tar_bytes() -> bytes:
    buf = BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i in range(3):
            data = f"sample {i}".encode()
            info = tarfile.TarInfo(f"s{i}.txt")
            info.size = len(data)
            tar.addfile(info, BytesIO(data))
    return buf.getvalue()


def _set_up(kind: str, endpoint: str, catalog: str) -> None:
    """What the job needs, made by this process (credentials in the options: no cluster)."""
    import dask.bag as db

    moto_client(endpoint).create_bucket(Bucket="here")
    if kind == "index_tar":
        moto_client(endpoint).put_object(Bucket="here", Key="tars/part-0.tar", Body=_tar_bytes())
        return
    if kind in ("compact", "copy"):
        shardcat.write(
            db.from_sequence(_samples(), npartitions=2),
            "s3://here/ds",
            catalog=catalog,
            dataset="ds",
            storage_options=_options(endpoint),
            progress=False,
        )
    if kind == "compact":  # both shards under half live: both are rewritten
        with shardcat.Catalog(catalog, storage_options=_options(endpoint)) as cat:
            shardcat.delete_keys(cat, "ds", [f"k/{i:03d}" for i in range(20) if i % 10 < 7])


def _run(kind: str, catalog: str, options: dict[str, Any], client: Any) -> None:
    import dask.bag as db

    if kind == "write":
        shardcat.write(
            db.from_sequence(_samples(), npartitions=2),
            "s3://here/ds",
            catalog=catalog,
            dataset="ds",
            storage_options=options,
            client=client,
            progress=False,
        )
    elif kind == "index_tar":
        shardcat.index_tar(
            "s3://here/tars/part-{0..0}.tar",
            catalog=catalog,
            dataset="wds",
            storage_options=options,
            client=client,
            progress=False,
        )
    elif kind == "compact":
        shardcat.compact(catalog, "ds", storage_options=options, client=client, progress=None)
    else:
        shardcat.copy_dataset(
            catalog,
            "ds",
            "s3://here/copy",
            name="ds2",
            storage_options=options,
            client=client,
            progress=None,
        )


@pytest.mark.parametrize("kind", ["write", "index_tar", "compact", "copy"])
def test_credentials_the_workers_lack_are_said_before_any_task_runs(kind, sqlite_url, monkeypatch):
    """The user's case: AWS_* set in the client's shell, not in the workers' environment."""
    from distributed import Client, LocalCluster

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance metadata to ask
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with counting_moto() as endpoint:
        _set_up(kind, endpoint, sqlite_url)
        with (
            LocalCluster(
                n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster,
            Client(cluster) as client,
        ):
            # Only now does this process get them: the worker started without.
            monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
            monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
            options = {k: v for k, v in _options(endpoint).items() if k not in ("key", "secret")}
            requests_seen(endpoint)  # forget the set-up
            with pytest.raises(StorageCredentialsError) as err:
                _run(kind, sqlite_url, options, client)
            uploads = _uploads(endpoint)
    text = str(err.value)
    assert text.startswith("on the Dask workers: ") and "-S key=" in text
    assert "testing" not in text
    assert uploads == []  # refused before any task built or sent a shard
