"""Run a client script in a real process and SIGKILL it (and its Dask workers) at a chosen moment.

Shared by the resume test and the reliability suite's killed-client tests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def kill_client(
    script: Path,
    args: list[str],
    *,
    until: str,
    delay: float = 0.0,
    timeout: float = 240.0,
) -> list[str]:
    """Run ``script``; once it prints the line ``until``, wait ``delay`` s and SIGKILL it.

    Every process it started (a LocalCluster's nannies and workers) is killed
    too, by pid. Returns the lines it printed up to ``until``. Bounded: a
    client that neither prints ``until`` nor exits within ``timeout`` seconds
    is killed and the call fails.
    """
    import psutil

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(script), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    children: list[psutil.Process] = []
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:  # bounded: the client prints `until`, exits, or the watchdog fires
            lines.append(line.strip())
            if line.strip() == until:
                break
        assert lines and lines[-1] == until, lines
        if delay:
            time.sleep(delay)
        children = psutil.Process(proc.pid).children(recursive=True)
        os.kill(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, psutil.NoSuchProcess):
        pass  # it finished within the delay: a kill after the moment it was aimed at
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
    # Its worker processes die with it; kill any that linger, by pid.
    _, alive = psutil.wait_procs(children, timeout=20)
    for child in alive:
        child.kill()
    return lines


def run_client(script: Path, args: list[str], *, timeout: float = 240.0) -> list[str]:
    """Run ``script`` to its end (it must succeed); return the lines it printed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(script), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()
