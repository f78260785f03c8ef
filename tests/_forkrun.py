"""The ``shardcat`` command, many times over, without paying its imports each time.

A ``shardcat`` process spends ~1 s importing before it does anything, and the
CLI tests run hundreds. So they run in children forked from one server
process (one per pytest process, started on first use) that imported
shardcat once. Each child sets its own arguments, environment, working folder
and standard streams (stdin an empty pipe or the given bytes, stdout and
stderr captured), then enters at ``sys.exit(main())`` exactly as the
installed ``shardcat`` script does: exit codes, output and an uncaught
exception's traceback are the script's own. The server itself never runs a
command, so one command cannot leave state behind for the next; whatever a
command leaves running in its process group is killed when it exits.

Tests whose subject is the process itself (killing or stopping it, its
memory, the installed script) run real processes instead; each file that
uses this runner keeps cases through the real script to show it sees what
the script prints.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

_SERVER = r"""
import base64, gc, json, os, signal, sys, tempfile, time

from shardcat.cli.app import main
# What the commands import lazily (not distributed: it starts threads at import).
import shardcat.catalog.migrate, shardcat.orchestration.write, shardcat.orchestration.gc
import psycopg, s3fs, fsspec.implementations.http, sqlalchemy.dialects.postgresql.psycopg
import secrets, pydantic
try:  # what typer and rich import as a command starts (private: may move)
    import typer._adapters, rich._emoji_codes
except ImportError:
    pass

# Requests come on fd 0 and replies go out on fd 1; sys.stdin and sys.stdout are left on
# /dev/null, so no buffered byte of the protocol is ever copied into a child.
requests, replies = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(null, 1)


def start(call):
    if call["stdin"] is None:
        stdin = os.open(os.devnull, os.O_RDONLY)
    else:  # as subprocess.run(input=...): a pipe holding the input, then its end
        stdin, feed = os.pipe()
        os.write(feed, base64.b64decode(call["stdin"]))  # fits the pipe (checked by the client)
        os.close(feed)
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    sys.stdout.flush()
    sys.stderr.flush()
    # What the server holds goes to the collector's permanent generation: a child's
    # collections and its exit then leave those pages alone instead of copying every one
    # (0.4 s down to 0.1 s a command); what the command itself creates is collected as ever.
    gc.freeze()
    pid = os.fork()
    if pid == 0:  # the child: becomes `shardcat ARGS` once serve() returns
        os.setpgid(0, 0)
        requests.close()
        replies.close()
        os.dup2(stdin, 0)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        os.close(stdin)
        os.chdir(call["cwd"])
        os.environ.clear()
        os.environ.update(call["env"])
        sys.argv = ["shardcat", *call["args"]]
        return None
    os.close(stdin)
    return pid, [call, out, err, time.monotonic(), False]


def serve():
    parallel = int(os.environ["FORK_PARALLEL"])
    for line in requests:
        calls = json.loads(line)
        pending, running, results = list(enumerate(calls)), {}, {}
        while pending or running:
            while pending and len(running) < parallel:
                i, call = pending.pop(0)
                started = start(call)
                if started is None:
                    return  # in the child
                pid, state = started
                running[pid] = [i, *state]
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                now = time.monotonic()
                for p, entry in running.items():
                    if not entry[5] and now - entry[4] > entry[1]["timeout"]:
                        entry[5] = True  # timed out
                        os.killpg(p, signal.SIGKILL)
                time.sleep(0.005)
                continue
            i, call, out, err, _, timed_out = running.pop(pid)
            try:
                os.killpg(pid, signal.SIGKILL)  # anything the command left behind
            except (ProcessLookupError, PermissionError):
                pass
            texts = []
            for f in (out, err):
                f.seek(0)
                texts.append(base64.b64encode(f.read()).decode())
                f.close()
            results[i] = [os.waitstatus_to_exitcode(status), *texts, timed_out]
        replies.write(json.dumps([results[i] for i in range(len(calls))]).encode() + b"\n")
        replies.flush()
    os._exit(0)  # EOF: the tests are over


serve()
sys.exit(main())  # as the `shardcat` script does
"""

IMPORT_TIME_ENV = ("SHARDCAT_POINT_LOOKUP", "SHARDCAT_TAR_WALKER", "SHARDCAT_RECORD_CODEC")
"""Variables shardcat reads as it is imported: a server is started per set of their values."""

PARALLEL = 2
"""Children run at a time (per pytest process)."""
PIPE_BUFFER = 65536
"""A Linux pipe's default capacity: the most a child's stdin may be given."""


@dataclass(frozen=True)
class Call:
    """One ``shardcat ARGS`` invocation."""

    args: Sequence[str]
    env: Mapping[str, str]  # the whole environment of the command
    cwd: str | Path
    timeout: float = 180  # seconds, then the command is killed (``timed_out``)
    stdin: bytes | None = None  # None: /dev/null; bytes: a pipe holding them


@dataclass(frozen=True)
class Outcome:
    returncode: int  # -9 when killed at the timeout
    stdout: bytes
    stderr: bytes
    timed_out: bool


class _Server:
    def __init__(self, env: dict[str, str]) -> None:
        self.log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env={**env, "FORK_PARALLEL": str(PARALLEL)},
        )

    def request(self, payload: list[dict[str, Any]]) -> list[list[Any]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(payload).encode() + b"\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=30)
            self.log.seek(0)
            tail = self.log.read().decode("utf-8", "replace")[-3000:]
            raise RuntimeError(f"the fork server exited ({self.proc.returncode}):\n{tail}")
        result: list[list[Any]] = json.loads(line)
        return result

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # EOF: the server exits
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


_servers: dict[tuple[str | None, ...], _Server] = {}


@atexit.register
def _close_servers() -> None:
    while _servers:
        _servers.popitem()[1].close()


def run_forked(calls: Sequence[Call]) -> list[Outcome]:
    """Run ``calls``, two at a time; their outcomes in the order given."""
    outcomes: list[Outcome | None] = [None] * len(calls)
    groups: dict[tuple[str | None, ...], list[int]] = {}
    for i, call in enumerate(calls):
        groups.setdefault(tuple(call.env.get(n) for n in IMPORT_TIME_ENV), []).append(i)
    for key, indices in groups.items():
        server = _servers.get(key)
        if server is None:
            env = {k: v for k, v in os.environ.items() if k not in IMPORT_TIME_ENV}
            env.update({n: v for n, v in zip(IMPORT_TIME_ENV, key) if v is not None})
            env["OPENBLAS_NUM_THREADS"] = "1"
            server = _servers[key] = _Server(env)
        for i in indices:
            assert len(calls[i].stdin or b"") <= PIPE_BUFFER, "stdin larger than a pipe holds"
        payload = [
            {
                "args": list(calls[i].args),
                "env": dict(calls[i].env),
                "cwd": str(calls[i].cwd),
                "timeout": calls[i].timeout,
                "stdin": None
                if calls[i].stdin is None
                else base64.b64encode(calls[i].stdin).decode(),
            }
            for i in indices
        ]
        try:
            replies = server.request(payload)
        except BaseException:  # interrupted or dead: the next call starts a fresh server
            del _servers[key]
            server.proc.kill()
            server.close()
            raise
        for i, (rc, out, err, timed_out) in zip(indices, replies):
            outcomes[i] = Outcome(rc, base64.b64decode(out), base64.b64decode(err), timed_out)
    return [o for o in outcomes if o is not None]


def text(data: bytes) -> str:
    """Output as ``subprocess.run(text=True)`` gives it (UTF-8, universal newlines)."""
    return data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")


def completed(
    calls: Sequence[Call], *, binary: bool = False, real: bool = False
) -> list[subprocess.CompletedProcess[Any]]:
    """:func:`run_forked` (:func:`run_real` if ``real``) with ``subprocess.run``'s results: a
    timeout raises :class:`subprocess.TimeoutExpired`, output is text unless ``binary``."""
    results = []
    for call, o in zip(calls, (run_real if real else run_forked)(calls)):
        command = ["shardcat", *call.args]
        if o.timed_out:
            raise subprocess.TimeoutExpired(command, call.timeout, o.stdout, o.stderr)
        if binary:
            results.append(subprocess.CompletedProcess(command, o.returncode, o.stdout, o.stderr))
        else:
            results.append(
                subprocess.CompletedProcess(command, o.returncode, text(o.stdout), text(o.stderr))
            )
    return results


def run_one(
    *args: str,
    env: Mapping[str, str],
    cwd: str | Path | None = None,
    timeout: float = 180,
    real: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``shardcat ARGS`` once, as ``subprocess.run(..., capture_output=True, text=True)`` would
    give it; forked unless ``real``."""
    return completed([Call(args, env, cwd or os.getcwd(), timeout=timeout)], real=real)[0]


def shardcat_command() -> list[str]:
    """The installed ``shardcat`` script (``python -m shardcat`` where there is none)."""
    script = Path(sys.executable).with_name("shardcat")
    return [str(script)] if script.exists() else [sys.executable, "-m", "shardcat"]


def run_real(calls: Sequence[Call]) -> list[Outcome]:
    """``calls`` through the installed ``shardcat`` script, two at a time (each a process of its
    own, its imports included): the reference the forked children are held to."""

    def one(call: Call) -> Outcome:
        try:
            p = subprocess.run(
                [*shardcat_command(), *call.args],
                capture_output=True,
                input=call.stdin,
                stdin=subprocess.DEVNULL if call.stdin is None else None,
                env=dict(call.env),
                cwd=call.cwd,
                timeout=call.timeout + 30,
            )
        except subprocess.TimeoutExpired as e:
            return Outcome(-9, e.stdout or b"", e.stderr or b"", True)
        return Outcome(p.returncode, p.stdout, p.stderr, False)

    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        return list(pool.map(one, calls))
