"""A ``Range`` of a large uncompressed entry reads that range alone (a seek in a video costs the
bytes sent), and ``Catalog.read_part`` underneath it.

The proof is behavioural: bytes of the entry outside the range are damaged
in the shard file. A whole read checks the entry's CRC32C and fails; a
range that avoids the damage is served, and one over it sends the damaged
bytes as they are (a part is not checked: docs/SERVE.md says so).
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import pytest

import shardcat
from shardcat.errors import ChecksumError, EntryNotFoundError, KeyNotFoundError
from shardcat.reading import Catalog
from shardcat.serve import ServeConfig

from .conftest import client_for

SIZE = 3 * 1024 * 1024
VIDEO = bytes((i * 7 + i // 256) % 256 for i in range(SIZE))


@pytest.fixture
def damaged(catalog_url: str, tmp_path: Any) -> dict[str, Any]:
    """Dataset 'v', key 'clip': a 3 MiB 'mp4' (stored as is) whose last MiB is then damaged,
    and a zstd 'bin'."""
    shard = tmp_path / "v" / "v-000000.shard"
    with Catalog(catalog_url) as cat:
        cat.create_dataset("v", str(tmp_path / "v"))
        with shardcat.ShardWriter(str(shard)) as w:
            w.add(
                "clip",
                {
                    "mp4": shardcat.Entry(VIDEO, "video/mp4"),
                    "bin": shardcat.Entry(b"z" * 100_000, "application/octet-stream", codec="zstd"),
                },
            )
        cat.register_shard("v", w.close())
    data = shard.read_bytes()
    at = data.index(VIDEO)  # the entry's bytes in the file
    with open(shard, "r+b") as f:  # damage the last MiB of the entry, in place
        f.seek(at + SIZE - 1024 * 1024)
        f.write(b"\xff" * 1024)
        f.flush()
        os.fsync(f.fileno())
    return {"url": catalog_url}


def test_a_range_reads_only_its_bytes_and_a_whole_read_is_still_checked(damaged):
    config = ServeConfig(catalogs=(("main", damaged["url"]),), allow_anonymous=True, rate_limit=0)
    href = "/api/v1/datasets/v/samples/clip/entries/mp4"
    with client_for(config, raise_server_exceptions=False) as client:
        head = client.get(href, headers={"Range": "bytes=0-65535"})
        assert head.status_code == 206
        assert head.content == VIDEO[:65536]
        assert head.headers["content-range"] == f"bytes 0-65535/{SIZE}"
        middle = client.get(href, headers={"Range": "bytes=1048576-1114111"})
        assert middle.status_code == 206 and middle.content == VIDEO[1048576:1114112]
        # A range over the damage is sent as stored: a part carries no checksum of its own.
        over = client.get(href, headers={"Range": f"bytes={SIZE - 1024 * 1024}-{SIZE - 1}"})
        assert over.status_code == 206 and over.content[:1024] == b"\xff" * 1024
        # The whole entry is read whole and checked: the damage is found.
        whole = client.get(href)
        assert whole.status_code == 502, whole.text  # the store's bytes are bad: a gateway error
        assert whole.json()["error"] == "ChecksumError", whole.text
        # A range that asks for every byte is the whole entry: checked too.
        everything = client.get(href, headers={"Range": "bytes=0-"})
        assert everything.json()["error"] == whole.json()["error"]
        # A compressed entry's range is a slice of the entry, read and checked whole.
        part = client.get(
            "/api/v1/datasets/v/samples/clip/entries/bin", headers={"Range": "bytes=10-19"}
        )
        assert part.status_code == 206 and part.content == b"z" * 10


def test_read_part_reads_a_window_of_an_uncompressed_entry(damaged):
    with Catalog(damaged["url"]) as cat:
        assert bytes(cat.read_part("v", "clip", "mp4", 100, 200)) == VIDEO[100:200]
        assert bytes(cat.dataset("v").catalog.read_part("v", "clip", "mp4", 0, 0)) == b""
        assert bytes(cat.read_part("v", "clip", "mp4", SIZE - 1, SIZE)) == VIDEO[-1:]
        with pytest.raises(ChecksumError):
            cat.get("v", "clip", ["mp4"])  # the whole entry is checked
        with pytest.raises(ValueError, match="compressed"):
            cat.read_part("v", "clip", "bin", 0, 10)
        with pytest.raises(ValueError, match="not within"):
            cat.read_part("v", "clip", "mp4", 0, SIZE + 1)
        with pytest.raises(EntryNotFoundError):
            cat.read_part("v", "clip", "wav", 0, 1)
        with pytest.raises(KeyNotFoundError):
            cat.read_part("v", "no-such-clip", "mp4", 0, 1)


def test_a_batch_lists_large_entries_without_reading_them_and_a_damaged_record_is_its_own_line(
    damaged,
):
    # 'clip' has a damaged 3 MiB video: a page of samples lists it (size, CRC from the row)
    # without reading it; only when its bytes are asked for ("data") is it read, and then
    # its damage is that key's error line, not the batch's.
    with Catalog(damaged["url"]) as cat:
        cat.register_shard("v", _healthy(cat))
    config = ServeConfig(catalogs=(("main", damaged["url"]),), allow_anonymous=True, rate_limit=0)
    with client_for(config) as client:
        r = client.post("/api/v1/datasets/v/batch", json={"keys": ["clip", "ok", "gone"]})
        assert r.status_code == 200, r.text
        lines = [json.loads(line) for line in r.text.splitlines()]
        assert [(x["key"], x["status"]) for x in lines] == [
            ("clip", "found"),
            ("ok", "found"),
            ("gone", "not_found"),
        ]
        video = {e["name"]: e for e in lines[0]["sample"]["entries"]}["mp4"]
        assert video["size"] == SIZE and "inline" not in video  # described, not read
        r = client.post(
            "/api/v1/datasets/v/batch",
            json={"keys": ["clip", "ok"], "entries": ["mp4"], "data": True},
        )
        lines = [json.loads(line) for line in r.text.splitlines()]
        assert [x["status"] for x in lines] == ["error", "found"]
        assert lines[0]["error"]["error"] == "ChecksumError"
        assert "verify" in lines[0]["error"]["hint"]
        assert "/" not in lines[0]["error"]["message"]  # no path of the store
        assert base64.b64decode(lines[1]["sample"]["entries"][0]["data"]) == b"fine"


def _healthy(cat: Catalog) -> Any:
    root = cat.info("v").root_url
    with shardcat.ShardWriter(f"{root}/v-000001.shard") as w:
        w.add("ok", {"mp4": shardcat.Entry(b"fine", "video/mp4")})
    return w.close()
