"""``shardcat index-files``: what it refuses, in one line that says what to do."""

from __future__ import annotations

import os

import pytest

import shardcat
from shardcat.errors import UnmatchedFilesError

from .test_dataset_cmds import run


def test_a_file_without_extension_is_refused_with_advice_index_files_can_follow(tmp_path):
    """index-files has no --no-ext-entry (a file in place is found by its name KEY.ENTRY):
    its refusal names only what it offers, before any cluster starts."""
    root = tmp_path / "photos"
    root.mkdir()
    (root / "0001.jpg").write_bytes(b"\xff\xd8 JPEG")
    (root / "README").write_text("about these photos")
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    result = run("index-files", str(root), "pets", catalog=catalog)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"error: 1 files under {root} have no extension, so no entry name under the first-dot "
        "key rule: README; skip them (--skip-unmatched), or rename them KEY.ENTRY (a file "
        "indexed in place is found by its name)"
    )
    with pytest.raises(UnmatchedFilesError, match=r"skip_unmatched=True\)"):
        shardcat.index_files(str(root), catalog=catalog, dataset="pets")


def test_a_fifo_in_the_folder_is_an_error_not_a_hang(tmp_path):
    """Opening a FIFO for reading waits for a writer for ever: it is refused, naming it."""
    root = tmp_path / "photos"
    root.mkdir()
    (root / "0001.jpg").write_bytes(b"\xff\xd8 JPEG")
    os.mkfifo(root / "0002.jpg")
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    result = run("index-files", str(root), "pets", "--workers", "1", catalog=catalog)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: cannot read {root}/0002.jpg (key '0002'): [Errno 22] not a regular file (a "
        "folder, FIFO, socket or device): shardcat reads regular files only; move it out of the "
        f"folder: '{root}/0002.jpg'"
    )
