"""Exported tar members: names that round-trip through webdataset, headers any tar reader reads."""

from __future__ import annotations

import io
import tarfile

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from shardcat.errors import ExportNameError, RecordTooLargeError
from shardcat.format import BytesSource
from shardcat.format.tar import taridx_from_scans, taridx_of_headers
from shardcat.format.tar.itar import TarHeaders
from shardcat.format.tar.members import (
    END_OF_ARCHIVE,
    member_headers,
    member_name,
    member_names,
    member_span,
)
from shardcat.format.tar.spec import blocks
from shardcat.format.tar.taridx import Taridx
from shardcat.testing.tars import wds_samples

from .helpers import read_back, scan_bytes


def _tar(samples: list[tuple[str, dict[str, bytes]]]) -> tuple[bytes, TarHeaders]:
    """The tar bytes an export writes for ``samples``, and its headers as TARIDX rows them."""
    out = bytearray()
    headers = TarHeaders([], [], [], [])
    for key, entries in samples:
        for name, payload in zip(member_names(key, list(entries)), entries.values()):
            head = member_headers(name, len(payload))
            assert member_span(name, len(payload)) == len(head.data) + blocks(len(payload))
            for n, s, o in zip(head.names, head.sizes, head.offsets):
                headers.names.append(n)
                headers.sizes.append(s)
                headers.offsets.append(len(out) + o)
                headers.entry.append(-1)
            out += head.data + payload + bytes(blocks(len(payload)) - len(payload))
    return bytes(out + END_OF_ARCHIVE), headers


KEYS = [
    "plain",
    "dots.in/a.folder/x",
    "ünïcødé/ключ",
    "/".join(f"d{i}" for i in range(70)) + "/leaf",  # folders in ustar's prefix field
    "p" * 99,  # the name alone is 100+ bytes: pax
    "long/" + "n" * 300,  # pax
    "__not_meta/x",
    "x/__meta__",  # skipped by webdataset only at the start of a name
]


def test_members_read_back_by_tarfile_webdataset_and_shardcat_and_their_taridx():
    samples = [
        (key, {"txt": f"text of {key}".encode(), "seg.png": bytes(range(i + 1))})
        for i, key in enumerate(KEYS)
    ]
    data, headers = _tar(samples)
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        assert [(m.name, m.size, m.mode, m.mtime) for m in tf.getmembers()] == [
            (f"{k}.{n}", len(v), 0o644, 0) for k, e in samples for n, v in e.items()
        ]
    expected = [{"__key__": k, **e} for k, e in samples]
    assert wds_samples(io.BytesIO(data)) == expected
    assert read_back(data) == expected
    # The rows iTar gives every header (pax ones included), as shardcat's scan rebuilds them.
    mine = taridx_of_headers([headers]).to_bytes()
    assert (
        mine
        == taridx_from_scans([scan_bytes(data)], sources=[BytesSource(data, "mem.tar")]).to_bytes()
    )
    assert Taridx.from_bytes(mine).n_rows == len(headers.names) > 2 * len(KEYS)
    assert member_headers("a.b", 5) == member_headers("a.b", 5)  # the same bytes every time


@pytest.mark.parametrize(
    ("key", "entry", "why"),
    [
        ("a.b", "jpg", "first dot"),
        ("x/v1.2", "jpg", "first dot"),
        ("k", "JPG", "lower-cases"),
        ("k", "__key__", "fields of its own"),
        ("k", "__url__", "fields of its own"),
        ("k", "__", "fields of its own"),
        ("/abs", "jpg", "absolute"),
        ("a//b", "jpg", "empty"),
        ("a/./b", "jpg", "'.'"),
        ("a/../b", "jpg", "'..'"),
        ("a/", "jpg", "empty after its last"),
        ("", "jpg", "empty after its last"),
        ("k", "", "entry name is empty"),
        ("k", "a/b", "holds a '/'"),
        ("k\n", "jpg", "newline"),
        ("k\0", "jpg", "NUL"),
        ("__meta__/x", "jpg", "metadata"),
        ("__x__/y", "jpg", "metadata"),
    ],
)
def test_names_webdataset_would_read_otherwise_are_refused(key, entry, why):
    with pytest.raises(ExportNameError, match=why) as raised:
        member_name(key, entry)
    assert (raised.value.key, raised.value.entry) == (key, entry)
    assert "export without it" in str(raised.value)


def test_a_sample_without_entries_is_refused_and_a_huge_entry_too():
    with pytest.raises(ExportNameError, match="no entries"):
        member_names("k", [])
    with pytest.raises(RecordTooLargeError, match="8 GiB"):
        member_headers("k.bin", 8**11)


_part = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.lists(_part, min_size=1, max_size=4), st.lists(_part, min_size=1, max_size=3)),
        min_size=1,
        max_size=4,
    )
)
def test_every_name_accepted_reads_back_the_same_through_webdataset(drawn):
    samples: dict[str, dict[str, bytes]] = {}
    for parts, entries in drawn:
        key = "/".join(parts)
        try:
            names = {e: member_name(key, e) for e in entries}
        except ExportNameError:
            continue
        samples.setdefault(key, {}).update({e: n.encode() for e, n in names.items()})
    assume(samples)
    data, _ = _tar(list(samples.items()))
    expected = [{"__key__": k, **e} for k, e in samples.items()]
    assert wds_samples(io.BytesIO(data)) == expected
    assert read_back(data) == expected
