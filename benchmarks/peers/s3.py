"""S3 for the benchmarks: moto on 127.0.0.1, answering ranged GETs by seek + read.

Stock moto reads (and copies) the whole object to answer a ranged GET, which
makes every ranged read cost as much as the whole shard. The in-process
server is patched the way ``benchmarks/bench_catalog.py`` does it
(``serve_ranges_properly``); on top, every GET response's body length is
counted, so "bytes fetched" is measured by the server for every system alike.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from benchmarks.bench_catalog import serve_ranges_properly
from benchmarks.peers.base import Store

_lock = threading.Lock()
_sent = [0]


def bytes_sent() -> int:
    """Body bytes of every GET the server answered so far."""
    return _sent[0]


def _count_get_bytes() -> None:
    """Count the body of every GET response, after moto has cut it to the requested range."""
    from moto.s3.responses import S3Response

    if getattr(S3Response, "_peers_counted", False):
        return
    key_response = S3Response.key_response

    def counted(self: Any, request: Any, full_url: str, headers: Any) -> Any:
        status, out_headers, body = key_response(self, request, full_url, headers)
        if request.method == "GET" and body is not None:
            with _lock:
                _sent[0] += len(body)
        return status, out_headers, body

    S3Response.key_response = counted  # type: ignore[method-assign]
    S3Response._peers_counted = True  # type: ignore[attr-defined]


class MotoS3:
    """A moto server on a free port with bucket ``bench``; ``store()`` points systems at it."""

    def __init__(self) -> None:
        import boto3
        from moto.server import ThreadedMotoServer

        serve_ranges_properly()
        _count_get_bytes()
        for name in ("werkzeug", "moto", "botocore", "urllib3"):
            logging.getLogger(name).setLevel(logging.ERROR)
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        ).create_bucket(Bucket="bench")

    def store(self) -> Store:
        options = {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"},
            "use_listings_cache": False,
        }
        return Store("s3", "s3://bench", options, endpoint=self.endpoint)

    def stop(self) -> None:
        self.server.stop()
