"""The scandir listing of local folders lists exactly what fsspec's local filesystem lists."""

from __future__ import annotations

import os
import tempfile

from fsspec.implementations.local import LocalFileSystem
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardcat.orchestration.files import _list_one, from_files, list_source
from shardcat.storage.local_listing import ScandirFileSystem, fast_local
from shardcat.testing.faults import FaultyFileSystem

_NAMES = st.sampled_from(
    ["a.jpg", "a.json", "b.seg.png", ".hidden.jpg", "README", "x1.txt", "x2.txt", "c d.bin"]
)
_DIRS = st.sampled_from(["d0", "d1", ".git", "sub.v2", "_versions"])

# A tree: files (folder path, name, size) and symlinks (where, target kind).
_FILES = st.lists(
    st.tuples(st.lists(_DIRS, max_size=3), _NAMES, st.integers(0, 300)), min_size=1, max_size=25
)
_LINKS = st.lists(
    st.tuples(st.lists(_DIRS, max_size=2), st.sampled_from(["file", "dir", "dangling"])),
    max_size=4,
)
_PATTERNS = ["*", "*/*.jpg", "**/*.txt", "d?/*", "**", "*/", "d0/**/a.*", "[d]1/*", "nothing*"]


def _build(root: str, files: list, links: list) -> None:
    for folders, name, size in files:
        where = os.path.join(root, *folders)
        os.makedirs(where, exist_ok=True)
        path = os.path.join(where, name)
        if not os.path.isdir(path):
            with open(path, "wb") as f:
                f.write(b"x" * size)
    for i, (folders, target) in enumerate(links):
        where = os.path.join(root, *folders)
        os.makedirs(where, exist_ok=True)
        if target == "file":
            dest = os.path.join(root, *files[0][0], files[0][1])
        elif target == "dir":
            dest = root
        else:
            dest = os.path.join(root, "no-such-file")
        os.symlink(dest, os.path.join(where, f"link{i}.lnk"))


def _seen(listing: dict) -> dict:
    return {p: (i.get("type"), i.get("size"), i.get("mtime")) for p, i in listing.items()}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=_FILES, links=_LINKS)
def test_scandir_lists_as_fsspec_does(files, links):
    slow, fast = LocalFileSystem(), ScandirFileSystem()
    with tempfile.TemporaryDirectory() as root:
        _build(root, files, links)
        for depth in (None, 1, 2):
            for withdirs in (False, True):
                want = slow.find(root, maxdepth=depth, withdirs=withdirs, detail=True)
                got = fast.find(root, maxdepth=depth, withdirs=withdirs, detail=True)
                assert list(got) == list(want)  # same paths, same order
                assert _seen(got) == _seen(want)
        assert fast.find(root) == slow.find(root)
        for pattern in _PATTERNS:
            path = f"{root}/{pattern}"
            assert _seen(fast.glob(path, detail=True)) == _seen(slow.glob(path, detail=True))
            assert _list_one(fast, path) == _list_one(slow, path)
        assert _list_one(fast, root) == _list_one(slow, root)
        # A single file, and nothing: fsspec's own answer.
        one = os.path.join(root, *files[0][0], files[0][1])
        assert fast.find(one, detail=True) == slow.find(one, detail=True)
        assert fast.find(os.path.join(root, "missing")) == slow.find(os.path.join(root, "missing"))


def test_only_fsspecs_own_local_filesystem_is_replaced():
    # A subclass (a test's faulty filesystem, a user's) keeps its own behaviour.
    assert isinstance(fast_local(LocalFileSystem()), ScandirFileSystem)
    faulty = FaultyFileSystem()
    assert fast_local(faulty) is faulty


def test_list_source_uses_the_scandir_listing_with_globs_and_braces(tmp_path):
    for rel in ("train/a.jpg", "train/a.json", "val/b.jpg", "val/.c.jpg", "test/c.jpg"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(rel.encode())
    braces = list_source(from_files(f"{tmp_path}/{{train,val}}/"))
    assert [s.key for s in braces.samples] == ["train/a", "val/b"]
    assert braces.hidden == 1
    globbed = list_source(from_files(f"{tmp_path}/*/*.jpg"))
    assert [s.key for s in globbed.samples] == ["test/c", "train/a", "val/b"]
    assert globbed.stamps[str(tmp_path / "val/b.jpg")].startswith("9:mtime=")
