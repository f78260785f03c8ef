"""``killtar://``: a local filesystem whose first read of one tar SIGKILLs the worker reading it.

Registered in every worker with ``client.run(register)``; the marker file
makes it fire once per test, so Dask's retry of the task succeeds.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

PROTOCOL = "killtar"


class KillTarFileSystem(LocalFileSystem):
    protocol = PROTOCOL
    root_marker = "/"
    victim = "train-000001.tar"
    """The basename of the tar whose first opening kills the process."""

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        path = str(path)
        if path.startswith(f"{PROTOCOL}://"):
            path = path[len(PROTOCOL) + 3 :]
        return super()._strip_protocol(path)

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        marker = os.path.join(os.path.dirname(path), "killed")
        if os.path.basename(path) == self.victim and not os.path.exists(marker):
            with open(marker, "w"):
                pass
            os.kill(os.getpid(), signal.SIGKILL)
        return super()._open(path, mode, **kwargs)


def register() -> None:
    fsspec.register_implementation(PROTOCOL, KillTarFileSystem, clobber=True)
