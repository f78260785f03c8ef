"""Files cut, truncated or replaced by another process while shardcat reads them: no SIGBUS.

A reader process (real, one per test, serving N rounds) indexes a tar (the
``index-tar`` scan, read as it is by default, and walked in a guarded
mapping with ``map_file=True``) or reads an epoch of shuffled packed
batches straight from shard files (their guarded mappings); meanwhile this
process cuts the file at a random byte, truncates it to nothing, or
replaces it, after a random delay. Each round must end in the original's
exact data (the cut came after the read, or a replaced file was already
open) or a typed shardcat error, and the reader must never die by a
signal: its return code is checked after every round. Bounded: a fixed
number of rounds, each with a timeout.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from shardcat.format.tar import scan_tar

ROUNDS = 12
SAMPLES_PER_SHARD = 150  # of ~60 KiB: most of a batch's time is the copy a cut can fault
ROUND_TIMEOUT = 60.0  # seconds for one round's read, far above its usual time

READER = r"""
import hashlib, json, os, sys, time, traceback
from shardcat.errors import ShardcatError

began = 0.0

def ready():
    global began
    print("ready", flush=True)
    began = time.perf_counter()  # the read's own time, imports left out

def digest(info):
    h = hashlib.sha256()
    h.update("\n".join(info.keys).encode())
    h.update(info.records.tobytes())
    h.update(info.entries.tobytes())
    return h.hexdigest()

def tar_index(path):
    from shardcat.reading.checks import scan_tar_url
    ready()
    return {"ok": digest(scan_tar_url(path, None))}

def tar_mapped(path):
    from shardcat.format.tar import scan_tar
    with open(path, "rb") as f:  # opened first: a file replaced from here on is not this one
        ready()
        return {"ok": digest(scan_tar(f, path, map_file=True))}

def gather(url):
    from shardcat.readers import pack_samples
    from shardcat.torch import ShardIterableDataset
    ds = ShardIterableDataset(url, "train", shuffle=True, shuffle_buffer=1000, batch_size=64,
                              collate=pack_samples, seed=3)
    ready()
    n = 0
    for batch in ds:
        for s in batch:
            i = int(s["__key__"].split("/")[1])
            if bytes(s["bin"]) != bytes([i % 251]) * (60000 + 7 * (i % 13)):
                return {"wrong": s["__key__"]}
            n += 1
    return {"ok": n}

for line in sys.stdin:
    mode, target = line.split()
    try:
        out = {"tar-index": tar_index, "tar-mapped": tar_mapped, "gather": gather}[mode](target)
    except ShardcatError as e:
        out = {"error": type(e).__name__, "typed": True, "message": str(e)}
    except Exception as e:
        out = {"error": type(e).__name__, "typed": False, "message": traceback.format_exc()}
    out["seconds"] = time.perf_counter() - began
    print(json.dumps(out), flush=True)
"""


class Reader:
    """The reader process: one request per round, answered by a line of JSON."""

    def __init__(self) -> None:
        # Unbuffered: a line read ahead into a buffer would hide from the select below.
        self.proc = subprocess.Popen(
            [sys.executable, "-c", READER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )

    def line(self, what: str) -> str:
        import selectors

        with selectors.DefaultSelector() as sel:
            assert self.proc.stdout is not None
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(ROUND_TIMEOUT):
                self.proc.kill()
                pytest.fail(f"the reader gave no answer in {ROUND_TIMEOUT} s ({what})")
        text = self.proc.stdout.readline().decode()
        if not text:
            code = self.proc.wait(10)
            pytest.fail(f"the reader died ({what}): return code {code} (negative: a signal)")
        return text

    def start(self, mode: str, target: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{mode} {target}\n".encode())
        assert self.line(f"{mode} {target}").strip() == "ready"

    def result(self, what: str) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.line(what))
        return out

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = self.proc.wait(30)
        assert code == 0, f"the reader ended with {code} (negative: killed by that signal)"


@pytest.fixture
def reader() -> Any:
    r = Reader()
    try:
        yield r
    finally:
        if r.proc.poll() is None:
            r.proc.kill()
            r.proc.wait()


def make_tar(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def _digest(data: bytes) -> str:
    info = scan_tar(io.BytesIO(data), "x.tar")
    h = hashlib.sha256()
    h.update("\n".join(info.keys).encode())
    h.update(info.records.tobytes())
    h.update(info.entries.tobytes())
    return h.hexdigest()


def _replace(path: Path, data: bytes) -> None:
    fresh = path.with_suffix(".new")
    fresh.write_bytes(data)
    os.replace(fresh, path)


def _damage(rng: random.Random, path: Path, size: int, other: bytes) -> str:
    action = rng.choice(["cut", "cut", "truncate", "replace", "cuts"])
    if action == "cut":
        os.truncate(path, rng.randrange(size))
    elif action == "truncate":
        os.truncate(path, 0)
    elif action == "replace":
        _replace(path, other)
    else:  # cut again and again, shorter each time, while it is read
        at = size
        for _ in range(5):
            at = rng.randrange(at // 2, at)
            os.truncate(path, at)
            time.sleep(0.002)
    return action


@pytest.mark.parametrize("mode", ["tar-index", "tar-mapped"])
def test_a_tar_cut_while_it_is_indexed_is_a_typed_error_or_its_exact_index(tmp_path, reader, mode):
    rng = random.Random(f"tar-cut:{mode}")
    members = [
        (f"s/{i:05d}.{ext}", rng.randbytes(rng.randrange(2000, 9000)))
        for i in range(12000)
        for ext in ("jpg", "cls")
    ]
    data = make_tar(members)  # ~130 MiB: long enough a scan to be cut during it
    other = make_tar(members[:100])
    original, replacement = _digest(data), _digest(other)
    path = tmp_path / "whole.tar"
    path.write_bytes(data)
    reader.start(mode, str(path))
    whole = reader.result("a round with no damage")
    assert whole["ok"] == original
    outcomes: dict[str, int] = {}
    for n in range(ROUNDS):
        path = tmp_path / f"round-{n}.tar"
        path.write_bytes(data)
        reader.start(mode, str(path))
        time.sleep(rng.uniform(0, whole["seconds"]))  # during the read, mostly
        action = _damage(rng, path, len(data), other)
        out = reader.result(f"round {n}, {action}")
        assert "wrong" not in out
        if "ok" in out:
            # Read before the damage; a replaced file may have been opened after it.
            assert out["ok"] in ((original, replacement) if action == "replace" else (original,))
            outcomes["exact"] = outcomes.get("exact", 0) + 1
        else:
            assert out["typed"], out["message"]
            outcomes[out["error"]] = outcomes.get(out["error"], 0) + 1
        path.unlink(missing_ok=True)
    reader.close()
    print(f"{mode}: {outcomes}")  # -s shows how the rounds ended
    assert set(outcomes) - {"exact"}, f"no round was cut while it read: {outcomes}"


def test_shuffled_packed_batches_from_a_shard_cut_under_them_are_a_typed_error_or_exact(
    tmp_path, reader
):
    pytest.importorskip("torch")
    from shardcat.readers import direct, packed

    if not packed._SHARED:
        pytest.skip("shared blocks need memfd_create")
    import shardcat
    from shardcat.reading import Catalog

    root = tmp_path / "shards"
    root.mkdir()
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    pristine: dict[Path, bytes] = {}
    with Catalog(url) as cat:
        cat.create_dataset("train", str(root))
        i = 0
        for s in range(8):
            path = root / f"train-{s:06d}.shard"
            with shardcat.ShardWriter(str(path), shard_number=s) as w:
                for _ in range(SAMPLES_PER_SHARD):
                    w.add(f"s/{i:05d}", {"bin": bytes([i % 251]) * (60000 + 7 * (i % 13))})
                    i += 1
            cat.register_shard("train", w.close())
            pristine[path] = path.read_bytes()
    assert direct.MAX_OPEN_SHARDS >= 8
    rng = random.Random("gather-cut")
    shards = sorted(pristine)
    reader.start("gather", url)
    whole = reader.result("an epoch with no damage")
    assert whole["ok"] == 8 * SAMPLES_PER_SHARD
    outcomes: dict[str, int] = {}
    for n in range(2 * ROUNDS):  # a batch's copy is a short window: more rounds to hit it
        victim = rng.choice(shards)
        other = pristine[shards[(shards.index(victim) + 1) % len(shards)]]
        reader.start("gather", url)
        time.sleep(rng.uniform(0, whole["seconds"]))  # during the epoch, mostly
        action = _damage(rng, victim, len(pristine[victim]), other)
        out = reader.result(f"round {n}, {action} of {victim.name}")
        assert "wrong" not in out, out
        if "ok" in out:
            assert out["ok"] == 8 * SAMPLES_PER_SHARD
            outcomes["exact"] = outcomes.get("exact", 0) + 1
        else:
            assert out["typed"], out["message"]
            outcomes[out["error"]] = outcomes.get(out["error"], 0) + 1
        _replace(victim, pristine[victim])
    reader.close()
    print(f"gather: {outcomes}")  # -s shows how the rounds ended
    assert set(outcomes) - {"exact"}, f"no round was cut while it read: {outcomes}"
