"""A Dask client for a scheduler address a user typed (``--scheduler``), checked first.

``distributed.Client(address)`` retries a refused connection until its
connect timeout (30 s by default) and then says only that it timed out. A
wrong port or a scheduler not started yet is the common case, so a TCP
address is tried once with a short timeout before the client is made, and
failure is a typed error that says what to do.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from ..errors import SchedulerUnreachableError

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["connect"]

PROBE_TIMEOUT = 5.0
"""Seconds the probe waits for the scheduler's port (a refused one fails at once)."""


def connect(address: str) -> Client:
    """``distributed.Client(address)``, after checking that something listens there.

    Raises
    ------
    SchedulerUnreachableError
        Nothing accepts connections at a ``tcp://`` (or bare ``host:port``) address.
    """
    from distributed import Client
    from distributed.comm.addressing import parse_address, parse_host_port

    scheme, location = parse_address(address)
    if scheme == "tcp":
        host, port = parse_host_port(location)
        try:
            socket.create_connection((host, port), timeout=PROBE_TIMEOUT).close()
        except OSError as e:
            raise SchedulerUnreachableError(
                f"no Dask scheduler answers at {address} ({e.strerror or e}): start one "
                f"(`dask scheduler`, then `dask worker {address}` on each machine), "
                "or check the address and port"
            ) from e
    return Client(address)
