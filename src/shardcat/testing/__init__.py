"""Conformance suites for code that reads shards, to run in your own tests (needs pytest).

Subclass a suite in a test module and give it the fixture it asks for::

    from shardcat.testing import StorageTests

    class TestMyStore(StorageTests):
        @pytest.fixture
        def store(self):
            yield "mystore://bucket/shardcat-tests", {"token": ...}

:class:`RangeSourceTests` checks the :class:`~shardcat._types.RangeSource`
contract of any source object; :class:`StorageTests` checks a storage
backend through :mod:`shardcat.storage` (URLs opened, cached, read in
batches, missing files, counted requests). shardcat runs both against local
files, ``memory://`` and S3 (``tests/storage/test_source_conformance.py``).
"""

from __future__ import annotations

from .sources import RangeSourceTests, RequestLog, StorageTests

__all__ = ["RangeSourceTests", "RequestLog", "StorageTests"]
