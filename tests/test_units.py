"""shardcat's own size parser (the core install has no Dask) agrees with Dask's."""

from __future__ import annotations

import pytest

from shardcat._units import parse_size


@pytest.mark.parametrize(
    "text",
    ["1", "256MB", "256 MB", "1.5GiB", "64 kib", "5kB", "2TB", "3 MiB", "100b", "0.5GB", "7 tib"],
)
def test_parse_size_agrees_with_dask(text):
    from dask.utils import parse_bytes

    assert parse_size(text) == parse_bytes(text)


@pytest.mark.parametrize("text", ["", "MB", "-1MB", "0", "12 parsecs", "1e3", "0.0001b"])
def test_parse_size_refuses_what_is_not_a_positive_size(text):
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


def test_count_of_is_singular_for_one_only() -> None:
    from shardcat._units import count_of

    assert count_of(1, "shard") == "1 shard"
    assert count_of(0, "shard") == "0 shards"
    assert count_of(2000, "record") == "2,000 records"
