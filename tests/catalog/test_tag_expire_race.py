"""A tag set while an expiry runs: the tagged version is kept, or the tag is refused.

Found by the concurrent-history checker (tests/reliability/test_history.py,
PostgreSQL, 2 of 48 histories of the long run): ``tag(t, V)`` and
``expire(keep_last=...)`` committing at once left tag ``t`` naming the
expired version ``V``; ``get_many(version=t)`` then served what was left of
``V`` (the records of the shards the expiry had not retired: 2 keys of 6)
instead of its state or ``VersionNotFoundError``, and ``log`` showed no tag.
Both read the versions and tags in READ COMMITTED without a common lock.

The race is made to happen every time: the expiry stops after it has read the
tags (just before it drops the versions) until the tag has committed, or
for at most ``WAIT`` seconds if the tag waits for the expiry.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from shardcat.catalog import versions as versions_module
from shardcat.errors import VersionNotFoundError
from shardcat.reading import Catalog

from .helpers import write_shard

WAIT = 3.0  # seconds the expiry waits for the tag (which, fixed, waits for the expiry)


def test_a_tag_racing_an_expiry_never_names_an_expired_version(
    catalog_url: str, local_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Catalog(catalog_url) as cat:
        cat.create_dataset("d", local_root)
        for n in range(4):  # versions 1-4, one shard each
            keys = [f"v{n}-{i}" for i in range(3)]
            job = cat.begin_job("d")
            cat.register_shard("d", write_shard(f"{local_root}/s{n}.shard", keys), job=job)
            cat.commit_job(job)
        cat.delete_keys("d", [f"v0-{i}" for i in range(3)])  # version 5: shard s0 is dead
        want = {
            r.key
            for r in cat.get_many(
                "d", [f"v{n}-{i}" for n in range(4) for i in range(3)], version=2
            ).records
            if r
        }

        tag_done = threading.Event()
        outcome: list[Any] = []
        real_drop = versions_module._drop_versions

        def drop_after_the_tag(session: Any, dataset_id: int, numbers: list[int]) -> None:
            if 2 in numbers and not tag_done.is_set():  # the tags were read: let the tag run
                tagger.start()
                tag_done.wait(WAIT)
            real_drop(session, dataset_id, numbers)

        def tag() -> None:
            with Catalog(catalog_url) as other:
                try:
                    outcome.append(other.tag("d", 2, "keep"))
                except VersionNotFoundError as e:
                    outcome.append(e)
            tag_done.set()

        tagger = threading.Thread(target=tag)
        monkeypatch.setattr(versions_module, "_drop_versions", drop_after_the_tag)
        expired = cat.expire("d", keep_last=1).expired
        tagger.join(60)
        assert not tagger.is_alive()

        tags = {t: v.number for v in cat.log("d") for t in v.tags}
        if isinstance(outcome[0], VersionNotFoundError):  # the expiry came first
            assert 2 in expired and "keep" not in tags
            with pytest.raises(VersionNotFoundError):
                cat.get_many("d", sorted(want), version="keep")
        else:  # the tag came first: version 2 is kept, whole
            assert outcome == [2] and 2 not in expired and tags["keep"] == 2
            got = cat.get_many("d", sorted(want), version="keep")
            assert {r.key for r in got.records if r} == want
