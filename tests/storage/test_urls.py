"""URL resolution and the URL helpers: filesystems per thread, refused credentials, braces."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcat.errors import StorageError
from shardcat.storage import brace_patterns, expand_braces, is_local, join, redact, resolve
from shardcat.storage.fs import protocol_of


def test_local_paths_and_file_urls_resolve_to_the_same_file(tmp_path: Path) -> None:
    target = tmp_path / "a.shard"
    target.write_bytes(b"x")
    for url in (str(target), f"file://{target}"):
        fs, path = resolve(url)
        assert is_local(url)
        assert fs.cat_file(path) == b"x"


def test_filesystems_are_cached_per_options() -> None:
    fs1, path = resolve("memory://cache/a")
    fs2, _ = resolve("memory://cache/b")
    assert fs1 is fs2 and path == "/cache/a"
    other: list[object] = []
    t = threading.Thread(target=lambda: other.append(resolve("memory://cache/a")[0]))
    t.start()
    t.join(timeout=30)
    # fsspec's instance cache serves every thread (per thread for blocking
    # filesystems, one per process for async ones, which run on fsspec's IO loop);
    # options differing by value give distinct instances.
    assert len(other) == 1
    fs_a, _ = resolve("s3://bucket/x", {"anon": True, "client_kwargs": {"region_name": "a"}})
    fs_b, _ = resolve("s3://bucket/x", {"anon": True, "client_kwargs": {"region_name": "b"}})
    fs_a2, _ = resolve("s3://bucket/y", {"client_kwargs": {"region_name": "a"}, "anon": True})
    assert fs_a is not fs_b
    assert fs_a is fs_a2  # option order does not matter


@pytest.mark.parametrize(
    "url",
    [
        "s3://AKIA:Zq9hidden@bucket/ds",
        "s3://AKIA:Zq9hid/den@bucket/ds",  # a '/' in the secret ends the "bucket" early
        "s3://Zq9hidden@bucket/ds",
        "gs://key:Zq9hidden@bucket/ds",
        "az://account:Zq9hidden@container/ds",
        "abfs://user:Zq9hidden@container.dfs.core.windows.net/ds",
    ],
)
def test_credentials_in_a_url_are_refused_without_echoing_them(url: str) -> None:
    with pytest.raises(StorageError, match="cannot carry credentials") as info:
        resolve(url)
    assert "Zq9hid" not in str(info.value) and "AKIA" not in str(info.value)
    assert "storage_options" in str(info.value)


def test_an_azure_account_in_the_url_is_not_a_credential() -> None:
    from shardcat.storage.fs import _refuse_credentials

    _refuse_credentials("abfs://container@account.dfs.core.windows.net/ds")  # no error


def test_an_unknown_protocol_names_what_to_install() -> None:
    with pytest.raises(StorageError, match="nosuchproto"):
        resolve("nosuchproto://x/y")


@pytest.mark.parametrize(
    ("url", "protocol"),
    [("/a/b", "file"), ("rel/b", "file"), ("file:///a", "file"), ("S3://b/k", "s3")],
)
def test_protocol_of(url: str, protocol: str) -> None:
    assert protocol_of(url) == protocol


segment = st.text(alphabet="abc-_.0123456789", min_size=1, max_size=8)


@given(base=st.lists(segment, min_size=1, max_size=3), names=st.lists(segment, max_size=3))
def test_join_puts_exactly_one_slash_between_segments(base: list[str], names: list[str]) -> None:
    root = "memory://" + "/".join(base)
    for trailing in ("", "/"):
        joined = join(root + trailing, *names)
        assert joined == "/".join([root, *names])
        assert "//" not in joined.split("://", 1)[1]


@given(
    prefix=st.text(alphabet="ab-/", max_size=6),
    first=st.integers(0, 500),
    count=st.integers(1, 40),
    width=st.integers(1, 6),
)
def test_brace_patterns_expand_back_to_the_urls_in_order(
    prefix: str, first: int, count: int, width: int
) -> None:
    urls = [f"s3://b/{prefix}x-{i:0{width}d}-0.shard" for i in range(first, first + count)]
    patterns = brace_patterns(urls)
    assert [u for p in patterns for u in expand_braces(p)] == urls
    assert len(patterns) <= len(urls)


@settings(max_examples=200)
@given(
    urls=st.lists(
        st.builds(
            lambda a, n, b: f"{a}{n}{b}",
            st.text(alphabet="xy/-.", max_size=4),
            st.integers(0, 120).map(str),
            st.text(alphabet="xy/-.", max_size=4),
        ),
        max_size=12,
    )
)
def test_brace_patterns_round_trip_any_list(urls: list[str]) -> None:
    assert [u for p in brace_patterns(urls) for u in expand_braces(p)] == urls


@given(
    user=st.text(alphabet="abcXYZ019", min_size=1, max_size=8),
    secret=st.text(alphabet="abcXYZ019!$", min_size=4, max_size=12).map(lambda s: f"Q{s}Q"),
)
def test_redact_never_keeps_a_password(user: str, secret: str) -> None:
    for url in (
        f"https://{user}:{secret}@host.example/a/b",
        f"postgresql+psycopg://{user}:{secret}@127.0.0.1/db",
        f"https://host.example/a?sig={secret}",
    ):
        assert secret not in redact(url)


def test_a_folder_names_the_shards_directly_inside_it(tmp_path: Path, s3: dict) -> None:
    from shardcat.errors import ShardNotFoundError
    from shardcat.storage.fs import resolve as resolve_url
    from shardcat.storage.patterns import expand_patterns

    for name in ("b.shard", "a.shard", "notes.txt", "sub/c.shard"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    local = expand_patterns([str(tmp_path)], folder_suffix=".shard")
    assert local == [str(tmp_path / "a.shard"), str(tmp_path / "b.shard")]
    # Without folder_suffix a folder is a URL like any other (read, and refused, later).
    assert expand_patterns([str(tmp_path)]) == [str(tmp_path)]
    # A file keeps its own name whatever its suffix.
    assert expand_patterns([str(tmp_path / "notes.txt")], folder_suffix=".shard") == [
        str(tmp_path / "notes.txt")
    ]
    with pytest.raises(ShardNotFoundError, match=r"holds no \*\.tar file"):
        expand_patterns([str(tmp_path)], folder_suffix=".tar")
    # On a store, a URL written as a folder (trailing /): listed, sorted.
    opts = s3["storage_options"]
    fs, _ = resolve_url(s3["url"], opts)
    for name in ("t/b.shard", "t/a.shard", "t/x.txt"):
        fs.pipe_file(f"{s3['bucket']}/{name}", b"x")
    remote = expand_patterns([f"{s3['url']}/t/"], opts, folder_suffix=".shard")
    assert remote == [f"{s3['url']}/t/a.shard", f"{s3['url']}/t/b.shard"]
    with pytest.raises(ShardNotFoundError, match="holds no"):
        expand_patterns([f"{s3['url']}/t/"], opts, folder_suffix=".tar")
