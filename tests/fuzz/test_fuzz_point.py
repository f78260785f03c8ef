"""Differential fuzzing of the compiled point lookup and batch rows (``_cpoint.c``) against Python.

Each case is a seeded random catalog on a SQLite file: native shards and a
tar indexed in place, versions made by appends, replacements
(``on_duplicate="replace"``) and ``delete_keys``; key hashes collided on
purpose (a row given another key's hash, as a real xxHash64 collision would
be); a hash-only dataset (``keys="hash"``, no key text: each candidate's record
holds the key compared) with rows given another of its keys' hash, so that
one key has two candidates, and a record's bytes flipped; column groups added over some of the live keys (none, one to three, or
more than the compiled code merges itself), one replacing the base's ``txt``,
one fixed in part (``mode="replace"``), one dropped; a record's bytes (a
base's or a group's) flipped after registration. Then random keys (present,
deleted, replaced, collided, missing, near misses, non-ASCII, not UTF-8) are
looked up through the compiled path and through the Python path
(``point.use("python")``), one catalog each, and compared:

* ``Point.get`` returns None ("not handled") or exactly the record the Python
  path returns; never a record where the Python path raises (the compiled
  code may reject more than its reference, never accept less); a key with
  groups is also compared with the general Python path (``Lookup.get``, which
  merges the point statement's rows itself, not the twin's ``merge_point``);
* ``Catalog.get`` and ``Catalog.get_many`` give the same records, or the same
  error (type and message), either way;
* ``Point.rows`` returns None or exactly the rows the Python driver returns
  for the batch statement.

``SHARDCAT_FUZZ_EXAMPLES`` sets the number of cases (default 30, about 5 s);
``SHARDCAT_FUZZ_SEED`` the first seed.
"""

from __future__ import annotations

import io
import json
import os
import random
import sqlite3
import tarfile
from pathlib import Path
from typing import Any

import pytest

import shardcat
from shardcat.catalog.groups import GroupWrite
from shardcat.format import recordcodec
from shardcat.format.checksums import signed_key_hash
from shardcat.reading import Catalog, point
from shardcat.reading.checks import scan_tar_url

pytestmark = pytest.mark.skipif(
    not point.available() or recordcodec.active() != "compiled",
    reason="the compiled point lookup is not available here",
)

CASES = int(os.environ.get("SHARDCAT_FUZZ_EXAMPLES", "30"))
FIRST_SEED = int(os.environ.get("SHARDCAT_FUZZ_SEED", "0"))
QUERIES = 120


def random_key(rng: random.Random) -> str:
    alphabet = "abcxyz019/_-. é中\u00ff\U0001f600"
    n = rng.randrange(1, 12)
    return "k/" + "".join(rng.choice(alphabet) for _ in range(n))


def payload(key: str, version: int, rng: random.Random) -> dict[str, Any]:
    size = rng.choice([0, 1, 17, 300, 5000])
    return {
        "bin": (f"{key}|{version}|".encode() * (size // 8 + 1))[:size],
        "txt": f"{key} v{version}",
    }


def near_misses(key: str) -> list[str]:
    """Keys a byte away from ``key``: a lookup must never answer one of them with ``key``'s record."""
    return [key + "x", key[:-1], key.upper(), key + "\x00", key.replace("/", "\\")]


class Case:
    """One random catalog, with the keys to ask for."""

    def __init__(self, seed: int, folder: Path) -> None:
        self.rng = random.Random(seed)
        self.folder = folder
        self.url = f"sqlite:///{folder / 'catalog.db'}"
        self.asked: list[str] = []
        self.shard_no = 0
        self.group_count = 0

    def build(self) -> None:
        rng = self.rng
        with Catalog(self.url) as cat:
            cat.create_dataset("ds", str(self.folder / "shards"))
            live: list[str] = []
            for version in range(rng.randrange(2, 5)):
                keys = list(dict.fromkeys(random_key(rng) for _ in range(rng.randrange(5, 40))))
                keys = [k for k in keys if k not in live]
                replaced = rng.sample(live, min(len(live), rng.randrange(0, 4)))
                self.write(cat, keys + replaced, version, replace=bool(replaced))
                live += keys
                if live and rng.random() < 0.6:
                    gone = rng.sample(live, rng.randrange(1, max(2, len(live) // 4)))
                    cat.delete_keys("ds", gone)
                    live = [k for k in live if k not in gone]
                    self.asked += gone
                self.asked += keys + replaced
            self.groups(cat, live)
            self.tar(cat)
            hashed = self.hash_only(cat)
        self.collide(live)
        self.collide_hashed(hashed)
        self.flip(live)
        self.asked += [k for k in rng.sample(self.asked, min(10, len(self.asked)))]
        self.asked += [
            m for k in rng.sample(self.asked, min(8, len(self.asked))) for m in near_misses(k)
        ]
        self.asked += [random_key(rng) for _ in range(10)] + ["k/\udc80", "k/a\ud800b", ""]

    def write(self, cat: Catalog, keys: list[str], version: int, *, replace: bool) -> None:
        if not keys:
            return
        url = str(self.folder / "shards" / f"ds-{self.shard_no:06d}.shard")
        with shardcat.ShardWriter(url, shard_number=self.shard_no) as w:
            for key in keys:
                w.add(key, payload(key, version, self.rng))
        self.shard_no += 1
        job = cat.begin_job("ds")
        cat.register_shard("ds", w.close(), job=job)
        cat.commit_job(job, on_duplicate="replace" if replace else "error")

    def groups(self, cat: Catalog, live: list[str]) -> None:
        """Column groups over some live keys: each key's rows are merged by the point lookup."""
        rng = self.rng
        count = rng.choice([0, 1, 2, 3, 9])  # 9: more rows than _cpoint.c's MAX_ROWS
        self.group_count = count
        if not live or not count:
            return
        for g in range(count):
            keys = rng.sample(live, rng.randrange(1, len(live) + 1))
            replace = g == 1  # a later group replacing the base's entry of that name
            self.group(cat, f"g{g}", keys, {"txt" if replace else f"g{g}.txt"}, replace=replace)
            self.asked += keys
        if count > 1:  # part of the first group fixed: the key's newer record is read
            fixed = rng.sample(live, rng.randrange(1, len(live) + 1))
            self.group(cat, "g0", fixed, {"g0.txt"}, mode="replace")
        if count > 2 and rng.random() < 0.5:
            cat.drop_group("ds", "g2")

    def group(
        self, cat: Catalog, name: str, keys: list[str], names: set[str], **write: Any
    ) -> None:
        url = str(self.folder / "shards" / f"ds.{name}-{self.shard_no:06d}.shard")
        size = self.rng.choice([0, 5, 200])
        with shardcat.ShardWriter(url, shard_number=self.shard_no) as w:
            for key in keys:
                w.add(key, {n: f"{name} {key} ".ljust(size, "~") for n in names})
        self.shard_no += 1
        job = cat.begin_job("ds")
        cat.register_shard("ds", w.close(), job=job)
        write.setdefault("on_missing", "skip")
        write["replace_entries"] = write.pop("replace", False)
        cat.commit_job(job, group=GroupWrite(name, **write))

    def tar(self, cat: Catalog) -> None:
        """A tar indexed in place, in a dataset of its own: its samples take the tar finisher."""
        url = str(self.folder / "samples.tar")
        keys = list(dict.fromkeys(f"t/{random_key(self.rng)[2:]}" for _ in range(15)))
        keys = [k for k in keys if "." not in k]
        with tarfile.open(url, "w", format=tarfile.GNU_FORMAT) as tar:
            for key in keys:
                for name, data in (("bin", key.encode() * 3), ("txt", b"t")):
                    member = tarfile.TarInfo(f"{key}.{name}")
                    member.size = len(data)
                    tar.addfile(member, io.BytesIO(data))
        cat.create_dataset("tars", str(self.folder))
        cat.register_shard("tars", scan_tar_url(url, None))
        self.asked += keys

    def hash_only(self, cat: Catalog) -> list[str]:
        """A hash-only dataset ``hs`` (keys ``h/...``) of one or two shards; its keys."""
        rng = self.rng
        cat.create_dataset("hs", str(self.folder / "hashed"), keys="hash")
        keys: list[str] = []
        for i in range(rng.randrange(1, 3)):
            new = list(dict.fromkeys("h/" + random_key(rng) for _ in range(rng.randrange(4, 20))))
            new = [k for k in new if k not in keys]
            url = str(self.folder / "hashed" / f"hs-{i:06d}.shard")
            with shardcat.ShardWriter(url, shard_number=i) as w:
                for key in new:
                    w.add(key, payload(key, 0, rng))
            cat.register_shard("hs", w.close())
            keys += new
        self.asked += keys
        return keys

    def collide_hashed(self, keys: list[str]) -> None:
        """In ``hs``, rows of other keys given a key's hash: that key has two or three candidates.

        The rows that lost their own hash are found by neither path (their key's
        hash names no row of theirs), as a shard written with another hash would be.
        """
        if len(keys) < 3:
            return
        db = sqlite3.connect(self.url.removeprefix("sqlite:///"))
        with db:
            target, *others = self.rng.sample(keys, self.rng.randrange(2, min(4, len(keys)) + 1))
            for other in others:
                db.execute(
                    "UPDATE records SET key_hash = ? WHERE key_hash = ? AND dataset_id ="
                    " (SELECT id FROM datasets WHERE name = 'hs')",
                    (signed_key_hash(target.encode()), signed_key_hash(other.encode())),
                )
            self.asked += [target] * 3 + others
        db.close()

    def collide(self, live: list[str]) -> None:
        """Give a few rows another key's hash: their lookups must not answer for that key."""
        if len(live) < 4:
            return
        db = sqlite3.connect(self.url.removeprefix("sqlite:///"))
        with db:
            for a, b in zip(*[iter(self.rng.sample(live, 4))] * 2):
                h = signed_key_hash(a.encode())
                db.execute("UPDATE records SET key_hash = ? WHERE key = ?", (h, b))
        db.close()

    def flip(self, live: list[str]) -> None:
        """A byte of a few live records changed after registration: both paths must refuse them."""
        db = sqlite3.connect(self.url.removeprefix("sqlite:///"))
        hashed = [k for k in self.asked if k.startswith("h/")]
        flipped = self.rng.sample(live, min(len(live), self.rng.randrange(0, 4)))
        flipped += self.rng.sample(hashed, min(len(hashed), self.rng.randrange(0, 2)))
        for key in flipped:
            # A hash-only row has no key text: found by its key's hash (one of a collision's rows).
            row = db.execute(
                "SELECT s.url, r.byte_offset, r.byte_length FROM records r JOIN shards s"
                " ON s.id = r.shard_id WHERE (r.key = ? OR (r.key IS NULL AND r.key_hash = ?))"
                " AND r.removed_version IS NULL",
                (key, signed_key_hash(key.encode())),
            ).fetchone()
            if row is None:
                continue
            url, offset, length = row
            with open(url, "r+b") as f:
                at = offset + self.rng.randrange(length)
                f.seek(at)
                byte = f.read(1)
                f.seek(at)
                f.write(bytes([byte[0] ^ 0x5A]))
            self.asked += [key] * 3
        db.close()


def outcome(call: Any, *args: Any) -> Any:
    """What ``call(*args)`` gave, comparable across paths: a record's content, or the error."""
    try:
        result = call(*args)
    except Exception as e:
        return ("error", type(e).__name__, str(e))
    return content(result)


def content(result: Any) -> Any:
    if result is None:
        return None
    if hasattr(result, "records"):  # a BatchResult
        return ("batch", [content(r) for r in result.records], sorted(result.missing))
    return (
        result.key,
        result.offset,
        result.length,
        {n: (e.content_type, bytes(e.data)) for n, e in result.entries.items()},
    )


def utf8(key: str) -> bool:
    try:
        key.encode()
    except UnicodeEncodeError:
        return False
    return True


@pytest.mark.parametrize("seed", range(FIRST_SEED, FIRST_SEED + CASES))
def test_compiled_point_lookup_and_rows_match_the_python_path(seed: int, tmp_path: Path) -> None:
    case = Case(seed, tmp_path)
    case.build()
    compiled = Catalog(case.url)
    previous = point.use("python")
    try:
        python = Catalog(case.url)
        python._lookup()  # opened now: it follows the switch
    finally:
        point.use(previous)
    try:
        fast = compiled._lookup().fast_get
        c_point = compiled._lookup()._point_lookup
        assert point.is_compiled(c_point)
        assert not point.is_compiled(python._lookup()._point_lookup)
        decode = recordcodec.decode_spanned
        handled = grouped = hashed = rows_seen = hashed_rows_seen = 0
        rng = random.Random(seed)
        for _ in range(QUERIES):
            key = rng.choice(case.asked)
            dataset = {"t/": "tars", "h/": "hs"}.get(key[:2], "ds")
            reference = outcome(python.get, dataset, key)
            # The fast path alone: None, or exactly the reference's record.
            got = outcome(fast, dataset, key, decode)
            if got is not None:
                handled += 1
                hashed += dataset == "hs"
                assert got == reference, (seed, dataset, key)
                if len(got[3]) > 2:  # a key with groups: the general path merges the same
                    grouped += 1
                    general = python._lookup()
                    with general.gate:
                        assert outcome(general.get, dataset, key) == got, (seed, key)
            assert outcome(compiled.get, dataset, key) == reference, (seed, dataset, key)
            batch = rng.sample(case.asked, min(len(case.asked), rng.randrange(1, 30)))
            assert outcome(compiled.get_many, dataset, batch) == outcome(
                python.get_many, dataset, batch
            ), (seed, dataset, batch)
            hashes = [signed_key_hash(k.encode()) for k in batch if utf8(k)]
            lookup = python._lookup()
            for hashed in (False, True):  # the batch statement, and the one ending with hashes
                rows = c_point.rows(dataset, hashes, hashed)
                if rows is not None and hashes:
                    sql = lookup._sql("batch_hashed", None)[0] if hashed else lookup._batch
                    expected = lookup._query(sql, (dataset, json.dumps(hashes)))
                    assert sorted(map(tuple, rows)) == sorted(map(tuple, expected)), (seed, batch)
                    rows_seen += 1
                    hashed_rows_seen += hashed
        # Every hash-only key once more, after the Python path's answer (its file open).
        for key in sorted({k for k in case.asked if k.startswith("h/")}):
            reference = outcome(python.get, "hs", key)
            assert outcome(compiled.get, "hs", key) == reference, (seed, key)
            got = outcome(fast, "hs", key, decode)
            if got is not None:
                hashed += 1
                assert got == reference, (seed, key)
        assert handled > 0  # the compiled path answered some: the comparison is not vacuous
        assert rows_seen > 0 and hashed_rows_seen > 0, seed  # and some batches' rows, each way
        assert hashed > 0, seed  # hash-only keys among them
        if 0 < case.group_count < 9:  # and merged some keys' groups itself
            assert grouped > 0, seed
    finally:
        compiled.close()
        python.close()
