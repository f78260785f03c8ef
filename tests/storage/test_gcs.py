"""Google Cloud Storage, for real: gcsfs against gcp-storage-emulator on 127.0.0.1.

A dataset written by Dask worker processes to ``gs://`` and read back through
the catalog, the readers and the command line; copied between S3 (moto) and
GCS; the preflight a job runs before it schedules anything; and the store's
failures (a missing object or bucket, refused credentials, an emulator that
is down) as shardcat's typed errors. The emulator's log names every request
it answered, so the preflight's questions are counted.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import shardcat
import shardcat.config
from _servers import free_port
from shardcat import ShardWriter, open_shard
from shardcat.errors import (
    BucketNotFoundError,
    ObjectExistsError,
    ShardNotFoundError,
    StorageCredentialsError,
    StoragePermissionError,
    StorageUnreachableError,
)
from shardcat.storage import SourceCache, open_source, resolve
from shardcat.storage.preflight import check_folder


@pytest.fixture(scope="module")
def client():
    """One worker process: the shards are written by a real Dask worker, given the options."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None
        ) as c,
        Client(c) as cl,
    ):
        yield cl


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "shardcat", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )


def samples(n: int) -> list[dict[str, Any]]:
    return [{"__key__": f"k{i:04d}", "txt": f"value {i}", "json": {"i": i}} for i in range(n)]


def read_head(url: str, options: dict[str, Any] | None) -> bytes:
    with contextlib.closing(open_source(url, options)) as src:
        return src.read_suffix(16)  # what every reader does first


def bucket_exists(gcs: dict[str, Any], bucket: str) -> bool:
    fs, _ = resolve(f"gs://{bucket}", gcs["storage_options"])
    fs.invalidate_cache()
    return bool(fs.exists(bucket))


# --- a dataset, end to end -----------------------------------------------------------


def test_a_dataset_on_gcs(gcs, tmp_path: Path, client):
    opts = gcs["storage_options"]
    root = f"{gcs['url']}/datasets/train"
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    summary = shardcat.write(
        samples(300),
        root,
        catalog=catalog,
        dataset="train",
        shard_size="16KB",
        storage_options=opts,
        client=client,
        progress=False,
    )
    assert summary.records == 300 and len(summary.shards) > 1
    assert all(s.startswith(f"{root}/") for s in summary.shards), summary.shards

    with shardcat.Catalog(catalog, storage_options=opts) as cat:
        assert cat.get("train", "k0123")["txt"].decode() == "value 123"
        batch = cat.get_many("train", ["k0001", "k0299", "k0150"])
        assert [r["json"].decode()["i"] for r in batch] == [1, 299, 150]
        # verify and reindex read every footer from the tail of an object.
        report = cat.verify("train")
        assert report.ok, report
        rows = cat.reindex("train", summary.shards)
        assert sum(r.record_count for r in rows) == 300
        assert cat.get("train", "k0299")["txt"].decode() == "value 299"

    # The reader, straight from a URL, and shardcat.read (a Dask bag, one partition per shard).
    with open_shard(summary.shards[0], opts) as reader:
        assert len(reader) > 0 and reader.verify().records == len(reader)
    keys = sorted(s["__key__"] for s in shardcat.read(catalog, "train", storage_options=opts))
    assert keys == [f"k{i:04d}" for i in range(300)]
    streamed = [r.key for r in shardcat.iter_shards(summary.shards, opts)]
    assert sorted(streamed) == keys

    # Every shard was published create-only: GCS refuses an upload with ifGenerationMatch=0
    # over an object that exists (HTTP 412). The emulator does not enforce preconditions, so
    # what is checked here is that each upload asked for it; the refusal's translation is
    # test_an_upload_refused_as_existing_is_object_exists_error.
    uploads = [p for m, p in gcs["server"].requests_since(0) if m == "POST" and "/upload/" in p]
    ours = [p for p in uploads if "datasets%2Ftrain%2F" in p or "datasets/train/" in p]
    assert len(ours) >= len(summary.shards), uploads
    assert all("ifGenerationMatch=0" in p for p in ours), ours


def test_the_command_line_writes_gets_and_lists_on_gcs(gcs, tmp_path: Path):
    src = tmp_path / "src"
    for i in range(12):
        folder = src / f"part{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"img{i:03d}.txt").write_text(f"a photo number {i}\n")
        (folder / f"img{i:03d}.json").write_text(json.dumps({"label": i}))
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    common = ["-c", catalog, "--json", "-S", "token=anon", "-S", f"endpoint_url={gcs['endpoint']}"]
    url = f"{gcs['url']}/pics"

    written = cli(*common, "write", str(src), url, "-d", "pics", "--shard-size", "1KB",
                  "--workers", "1", "--no-progress")  # fmt: skip
    assert written.returncode == 0, written.stderr
    out = json.loads(written.stdout)
    assert out["records"] == 12, out

    got = cli(*common, "get", "pics", "part1/img004")
    assert got.returncode == 0, got.stderr
    sample = json.loads(got.stdout)
    assert "a photo number 4" in json.dumps(sample) and '"label": 4' in json.dumps(sample)

    listed = cli(*common, "ls", "pics")
    assert listed.returncode == 0, listed.stderr
    shards = json.loads(listed.stdout)
    text = json.dumps(shards)
    assert url in text and text.count(".shard") >= 2, text

    missing = cli(*common, "get", "pics", "part1/nope")
    assert missing.returncode == 1 and "Traceback" not in missing.stderr


# --- copies between S3 and GCS -----------------------------------------------------------


def test_a_dataset_copied_from_s3_to_gcs_and_moved_back(s3, gcs, tmp_path: Path, client):
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    shardcat.write(samples(120), f"{s3['url']}/ds", catalog=catalog, dataset="ds",
                   shard_size="8KB", storage_options=s3["storage_options"], client=client,
                   progress=False)  # fmt: skip
    copied = shardcat.copy_dataset(
        catalog,
        "ds",
        f"{gcs['url']}/copy",
        name="copy",
        storage_options=s3["storage_options"],
        destination_options=gcs["storage_options"],
        client=client,
    )
    assert copied.records == 120 and copied.copied == copied.shards > 1
    fs, folder = resolve(f"{gcs['url']}/copy", gcs["storage_options"])
    fs.invalidate_cache()
    on_gcs = sorted(p for p in fs.ls(folder, detail=False) if p.endswith(".shard"))
    assert len(on_gcs) > 1
    with shardcat.Catalog(catalog, storage_options=gcs["storage_options"]) as cat:
        assert cat.get("copy", "k0042")["txt"].decode() == "value 42"
        assert cat.verify("copy").ok

    # Moved back to S3: the dataset's GCS shards are removed (deletes on GCS).
    shardcat.copy_dataset(
        catalog,
        "copy",
        f"{s3['url']}/moved",
        move=True,
        storage_options=gcs["storage_options"],
        destination_options=s3["storage_options"],
        client=client,
    )
    fs.invalidate_cache()
    assert not [p for p in fs.find(folder) if p.endswith(".shard")]
    with shardcat.Catalog(catalog, storage_options=s3["storage_options"]) as cat:
        assert cat.get("copy", "k0119")["txt"].decode() == "value 119"


def test_gc_and_delete_remove_objects_on_gcs(gcs, tmp_path: Path):
    """gc removes an aborted job's shards and an orphan (older than the grace); delete removes
    the rest: listing, age (the objects' times) and deletes against the emulator."""
    import datetime as dt

    from shardcat.orchestration.gc import delete_dataset, gc

    options = gcs["storage_options"]
    root = f"{gcs['url']}/ds"

    def shard(url: str, tag: str) -> Any:
        with ShardWriter(url, storage_options=options, exclusive=True) as w:
            for i in range(20):
                w.add(f"{tag}/{i:03d}", {"txt": f"{tag} {i}"})
        return w.close()

    fs, folder = resolve(root, options)

    def objects() -> list[str]:
        fs.invalidate_cache()
        return sorted(p.rsplit("/", 1)[1] for p in fs.find(folder) if p.endswith(".shard"))

    catalog = f"sqlite:///{tmp_path / 'c.db'}"
    with shardcat.Catalog(catalog, storage_options=options, create=True) as cat:
        cat.create_dataset("d", root)
        job = cat.begin_job("d")
        for n in range(3):
            cat.register_shard("d", shard(f"{root}/ok-{n}.shard", f"ok{n}"), job=job)
        cat.commit_job(job)
        job = cat.begin_job("d")
        for n in range(2):
            cat.register_shard("d", shard(f"{root}/bad-{n}.shard", f"bad{n}"), job=job)
        cat.abort_job(job)
        shard(f"{root}/lost-0.shard", "lost")  # written, never registered
        ok = [f"ok-{n}.shard" for n in range(3)]
        assert objects() == ["bad-0.shard", "bad-1.shard", "lost-0.shard", *ok]

        report = gc(cat, "d", grace=dt.timedelta(0))
        assert not report.errors, report.errors
        removed = sorted(u.rsplit("/", 1)[1] for u in report.deleted_shards)
        assert removed == ["bad-0.shard", "bad-1.shard"]
        assert [u.rsplit("/", 1)[1] for u in report.orphans] == ["lost-0.shard"]
        assert objects() == ok
        assert cat.get("d", "ok1/007")["txt"].decode() == "ok1 7"

        delete_dataset(cat, "d")
        assert objects() == []


# --- the preflight ---------------------------------------------------------------------


def test_check_folder_accepts_a_new_folder_and_refuses_a_missing_bucket(gcs):
    options = gcs["storage_options"]
    check_folder(f"{gcs['url']}/not/yet/written", options)  # a new dataset's folder
    with pytest.raises(BucketNotFoundError) as err:
        check_folder(f"gs://{gcs['bucket']}-missing/ds", options)
    assert err.value.bucket == f"{gcs['bucket']}-missing"
    assert "create it first" in str(err.value) and "\n" not in str(err.value)
    assert not bucket_exists(gcs, f"{gcs['bucket']}-missing")  # never created


def test_check_folder_asks_a_bounded_question_of_a_folder_with_objects(gcs):
    # The preflight runs on the client and on every worker, so it must not grow with the dataset.
    fs, _ = resolve(gcs["url"], gcs["storage_options"])
    # The emulator answers one request at a time (~0.1 s an upload): 30 objects, not a page's
    # worth; what bounds the question is that its one listing asks for at most one object.
    fs.pipe({f"{gcs['bucket']}/ds/shard-{i:06d}.shard": b"" for i in range(30)})
    server = gcs["server"]
    mark = server.mark()
    check_folder(f"{gcs['url']}/ds", gcs["storage_options"])
    asked = server.requests_since(mark)
    mark = server.mark()
    check_folder(f"{gcs['url']}/new", gcs["storage_options"])
    asked_new = server.requests_since(mark)
    for requests in (asked, asked_new):
        # gcsfs's info: a GET of the object of that name and a listing of at most one object;
        # for a folder with nothing in it, one more question: whether the bucket exists.
        assert 2 <= len(requests) <= 4, requests
        listings = [path for _, path in requests if "/o?" in path]
        assert listings and all("maxResults=1" in p for p in listings), requests
    assert len(asked) == 2, asked


def test_a_write_into_a_missing_bucket_fails_before_anything_is_uploaded(gcs, tmp_path, client):
    server = gcs["server"]
    mark = server.mark()
    missing = f"{gcs['bucket']}-nope"
    with pytest.raises(BucketNotFoundError) as err:
        shardcat.write(samples(20), f"gs://{missing}/ds", catalog=f"sqlite:///{tmp_path}/c.db",
                       dataset="ds", storage_options=gcs["storage_options"], client=client,
                       progress=False)  # fmt: skip
    assert "create it first" in str(err.value)
    uploads = [r for r in server.requests_since(mark) if r[0] in ("POST", "PUT", "DELETE")]
    assert uploads == []
    assert not bucket_exists(gcs, missing)
    with shardcat.Catalog(f"sqlite:///{tmp_path}/c.db") as cat:
        assert "ds" not in [d.name for d in cat.datasets()]


# --- the store's failures as shardcat's errors -------------------------------------------


def test_a_missing_object_is_shard_not_found(gcs):
    url = f"{gcs['url']}/ds/missing.shard"
    with pytest.raises(ShardNotFoundError) as err:
        read_head(url, gcs["storage_options"])
    assert type(err.value) is ShardNotFoundError, err.value
    assert err.value.path == url and "no such shard" in str(err.value)
    with SourceCache(gcs["storage_options"]) as cache, pytest.raises(ShardNotFoundError) as err2:
        cache.read(url, 0, 10)
    assert type(err2.value) is ShardNotFoundError


def test_a_missing_bucket_is_bucket_not_found_on_read_and_write(gcs):
    missing = f"{gcs['bucket']}-gone"
    url = f"gs://{missing}/ds/x.shard"
    with pytest.raises(BucketNotFoundError) as err:
        read_head(url, gcs["storage_options"])
    assert err.value.bucket == missing
    assert str(err.value).startswith(f"bucket '{missing}' does not exist")
    assert "create it first, or check the URL" in str(err.value)
    with SourceCache(gcs["storage_options"]) as cache, pytest.raises(BucketNotFoundError):
        cache.read(url, 0, 10)
    # A write never creates the bucket.
    with (
        pytest.raises(BucketNotFoundError),
        ShardWriter(url, storage_options=gcs["storage_options"], exclusive=True) as w,
    ):
        w.add("a", {"bin": b"x"})
    assert not bucket_exists(gcs, missing)


def test_an_emulator_that_is_down_is_unreachable_within_the_deadline():
    port = free_port()  # nothing listens there
    options = {"token": "anon", "endpoint_url": f"http://127.0.0.1:{port}"}
    shardcat.config.set(storage_retry_deadline=2)
    started = time.monotonic()
    with pytest.raises(StorageUnreachableError) as err:
        read_head("gs://bucket/ds/x.shard", options)
    took = time.monotonic() - started
    # gcsfs retries a refused connection for ~30 s on its own: each of shardcat's tries is
    # cut off at the deadline's time left (at least a second), so it ends soon after.
    assert took < 2 + 10, took  # gcsfs alone would take ~30 s
    message = str(err.value)
    assert "\n" not in message and "gs://bucket/ds/x.shard" in message
    assert "SHARDCAT_STORAGE_RETRY_DEADLINE" in message, message
    assert isinstance(err.value, ConnectionError)


def test_a_job_into_an_emulator_that_is_down_fails_in_its_preflight(tmp_path):
    # An upload is not cut off at the deadline (gcsfs tries a refused connection for ~30 s):
    # a job asks the store first, within the deadline, before a cluster starts.
    options = {"token": "anon", "endpoint_url": f"http://127.0.0.1:{free_port()}"}
    shardcat.config.set(storage_retry_deadline=2)
    started = time.monotonic()
    with pytest.raises(StorageUnreachableError):
        shardcat.write(samples(5), "gs://bucket/ds", catalog=f"sqlite:///{tmp_path}/c.db",
                       dataset="ds", storage_options=options, progress=False)  # fmt: skip
    # Well under gcsfs's ~30 s of its own tries (imports and the catalog take some seconds).
    assert time.monotonic() - started < 2 + 13


@contextlib.contextmanager
def answering(status: int, message: str) -> Iterator[str]:
    """A server that answers every request with ``status`` and GCS's JSON error body."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            body = json.dumps({"error": {"code": status, "message": message}}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_an_upload_refused_as_existing_is_object_exists_error():
    # GCS answers 412 (precondition failed) to a create-only upload over an existing object.
    with answering(412, "At least one of the pre-conditions you specified did not hold.") as ep:
        options = {"token": "anon", "endpoint_url": ep}
        with (
            pytest.raises(ObjectExistsError) as err,
            ShardWriter("gs://bucket/ds/x.shard", storage_options=options, exclusive=True) as w,
        ):
            w.add("a", {"bin": b"x"})
    assert "gs://bucket/ds/x.shard" in str(err.value)


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (403, "anonymous caller does not have storage.objects.get access"),
        (401, "Anonymous caller lacks credentials"),
    ],
)
def test_refused_credentials_are_a_permission_error(status, message):
    from gcsfs.core import GCSFileSystem

    GCSFileSystem.clear_instance_cache()
    shardcat.config.set(storage_retry_deadline=2)
    with answering(status, message) as endpoint:
        options = {"token": "anon", "endpoint_url": endpoint}
        started = time.monotonic()
        with pytest.raises(StoragePermissionError) as err:
            read_head("gs://bucket/ds/x.shard", options)
    assert time.monotonic() - started < 2, "a refusal is not retried"
    text = str(err.value)
    assert text.startswith("gs://bucket/ds/x.shard: access denied (HTTP ")
    assert f"HTTP {status}" in text and "check the credentials" in text and "\n" not in text


def test_no_credentials_found_is_a_credentials_error_with_the_fix(gcs, tmp_path, monkeypatch):
    # token="google_default": Google's chain only (no key file, no gcloud login, no VM).
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{free_port()}")
    options = {"token": "google_default", "endpoint_url": gcs["endpoint"]}
    with pytest.raises(StorageCredentialsError) as err:
        read_head(f"{gcs['url']}/ds/x.shard", options)
    text = str(err.value)
    assert text.startswith(f"no Google Cloud credentials found for {gcs['url']}/ds/x.shard: ")
    assert "GOOGLE_APPLICATION_CREDENTIALS" in text and "-S token=" in text and "\n" not in text


# --- which gcsfs filesystem an endpoint gets ---------------------------------------------


@pytest.mark.parametrize(
    ("options", "env", "json_api"),
    [
        ({"token": "anon", "endpoint_url": "http://127.0.0.1:9023"}, None, True),
        ({"token": "anon"}, "127.0.0.1:9023", True),  # gcsfs's own emulator variable
        ({"token": "anon"}, "http://localhost:4443", True),
        ({"token": "anon"}, None, False),  # Google Cloud Storage itself
        ({"token": "anon", "endpoint_url": "https://storage.example.com"}, None, False),
    ],
)
def test_an_emulator_endpoint_gets_the_json_api_filesystem(options, env, json_api, monkeypatch):
    """gcsfs's default class first asks a gRPC API that emulators lack (60 s per call against
    one): a plain-HTTP endpoint gets gcsfs's JSON-API class, from the options alone."""
    import gcsfs
    from gcsfs.core import GCSFileSystem

    if env is None:
        monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    else:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", env)
    GCSFileSystem.clear_instance_cache()
    fs, path = resolve("gs://bucket/ds/x.shard", options)
    assert path == "bucket/ds/x.shard"
    if json_api:
        assert type(fs) is GCSFileSystem
    else:
        assert type(fs) is gcsfs.GCSFileSystem  # whichever gcsfs picks (its extended class)
