"""The bad-input run of the reliability suite: damaged files through every read path, bounded.

A *subject* is one kind of file shardcat reads — a native shard, a WebDataset
tar indexed in place, a TARIDX index — with the original it damages and the
read paths it drives. For each case of :func:`~shardcat.testing.mutations.mutations`
the damaged file goes through every path and each path's result is judged:

* ``refused``: a typed shardcat error (:class:`~shardcat.errors.ShardcatError`);
* ``intact``: the data returned equals the original's (the damage missed
  what was read, or a path that reads nothing damaged);
* ``accepted``: a file that still parses but says something else (TARIDX
  has no checksum: a changed offset is valid to its reader; the CRCs stored
  when a tar is indexed are what catch it at read time);
* failures: ``wrong-data`` (a value that differs from the original's, or
  a damaged file that ``verify`` calls clean), ``untyped`` (any other
  exception, ``MemoryError`` included), ``hang`` (a case over the time
  limit) and ``crash`` (the worker process died).

Cases run in a worker process (spawned, so nothing is inherited) whose
address space is capped (``RLIMIT_AS``, 2 GiB by default): a length read
from a damaged field that drives an allocation fails the case instead of
the machine. The parent gives each case ``timeout`` seconds, then kills the
worker, records a hang and starts a new worker at the next case.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing as mp
import os
import random
import resource
import tarfile
import tempfile
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ShardcatError
from .mutations import mutations

__all__ = ["FAILURES", "SUBJECTS", "CaseResult", "RunReport", "run_bad_input"]

FAILURES = ("wrong-data", "untyped", "hang", "crash")
DEFAULT_ADDRESS_SPACE = 2 << 30
SEED = 20261123


@dataclass(frozen=True, slots=True)
class CaseResult:
    """How one damaged file fared: its worst outcome over every read path."""

    subject: str
    case: int
    kind: str
    detail: str
    outcome: str  # refused | intact | mixed | accepted | a FAILURES value
    message: str = ""
    seconds: float = 0.0


@dataclass
class RunReport:
    """Counts per subject, mutation kind and outcome, and every failure in full."""

    results: list[CaseResult] = field(default_factory=list)

    @property
    def failures(self) -> list[CaseResult]:
        return [r for r in self.results if r.outcome in FAILURES]

    def counts(self) -> Counter[tuple[str, str]]:
        return Counter((r.subject, r.outcome) for r in self.results)

    def kinds(self) -> Counter[tuple[str, str]]:
        return Counter((r.subject, r.kind) for r in self.results)

    @property
    def slowest(self) -> float:
        return max((r.seconds for r in self.results), default=0.0)


# --- judging one read path -----------------------------------------------------------------


class _Judge:
    """Collects each read path's verdict for one case."""

    def __init__(self) -> None:
        self.verdicts: list[tuple[str, str, str]] = []  # (path, outcome, message)

    def check(self, path: str, fn: Callable[..., Any], *args: Any, want: Any = None) -> Any:
        """Run ``fn(*args)``; compare its result with ``want`` unless ``want`` is None."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a flipped minor version warns, then fails a CRC
                got = fn(*args)
        except ShardcatError as e:
            self.verdicts.append((path, "refused", f"{type(e).__name__}"))
            return None
        except Exception as e:  # everything else is a defect: that is what the run looks for
            last = traceback.extract_tb(e.__traceback__)[-1]
            where = f"{Path(last.filename).name}:{last.lineno}"
            self.verdicts.append((path, "untyped", f"{type(e).__name__} at {where}: {e}"[:300]))
            return None
        if want is not None and got != want:
            self.verdicts.append((path, "wrong-data", "returned data that differs"))
            return None
        self.verdicts.append((path, "intact", ""))
        return got

    def fail(self, path: str, message: str) -> None:
        self.verdicts.append((path, "wrong-data", message))

    def outcome(self) -> tuple[str, str]:
        for bad in ("wrong-data", "untyped"):
            hits = [f"{p}: {m}" for p, o, m in self.verdicts if o == bad]
            if hits:
                return bad, "; ".join(hits[:3])
        seen = {o for _, o, _ in self.verdicts}
        if "accepted" in seen:
            return "accepted", ""
        if seen == {"intact"}:
            return "intact", ""
        if seen == {"refused"}:
            return "refused", ""
        return "mixed", ""


def _plain(record: Any) -> tuple[str, dict[str, bytes]]:
    return record.key, {n: bytes(e.data) for n, e in record.entries.items()}


# --- subjects ------------------------------------------------------------------------------


def _samples() -> list[dict[str, Any]]:
    import numpy as np

    from ..format import Entry

    rng = random.Random(7)
    out: list[dict[str, Any]] = []
    for i in range(10):
        sample: dict[str, Any] = {"__key__": f"bad/{i:04d}", "json": {"label": i % 3}}
        if i % 2 == 0:
            sample["jpg"] = rng.randbytes(100 + 13 * i)
        if i % 3 == 0:
            sample["txt"] = "caption " * (i + 1)
        if i % 4 == 1:
            sample["npy"] = np.arange(i + 3, dtype="<f4")
        if i % 5 == 2:
            sample["bin"] = Entry(bytes(64 * i), "application/x-zeros", "zstd")
        out.append(sample)
    return out


class _Shard:
    """A native shard: the format reader, the catalog's lookups, verify, ``shardcat inspect``."""

    name = "shard"

    def __init__(self, workdir: Path) -> None:
        from ..format import ShardReader, ShardWriter
        from ..format.spec import HEADER_SIZE, TRAILER_SIZE

        self.originals: list[bytes] = []
        for compression, alignment in ((None, 64), ("zstd", 8)):
            buf = io.BytesIO()
            with ShardWriter(
                buf,
                compression=compression,
                alignment=alignment,
                clock=lambda: 1,
                file_id=bytes(16),
            ) as w:
                for s in _samples():
                    w.write(s)
            self.originals.append(buf.getvalue())
        self.records = [_plain(r) for r in ShardReader(self.originals[0], name="x")]
        self.keys = [k for k, _ in self.records]
        self.structured = []
        for data in self.originals:
            footer = int.from_bytes(data[-TRAILER_SIZE : -TRAILER_SIZE + 8], "little")
            self.structured.append(
                [
                    (0, HEADER_SIZE),
                    (footer, len(data) - TRAILER_SIZE),
                    (len(data) - TRAILER_SIZE, len(data)),
                ]
            )
        # The catalog knows the originals; the files are then damaged under it.
        from ..reading import Catalog

        self.catalog = Catalog(f"sqlite:///{workdir / 'catalog.db'}")
        self.paths = []
        for i, data in enumerate(self.originals):
            path = workdir / f"bad-{i}" / "bad-000000.shard"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            self.catalog.create_dataset(f"bad-{i}", str(path.parent))
            self.catalog.register_shard(f"bad-{i}", ShardReader(str(path), name=str(path)).info)
            self.paths.append(path)

    def cases(self, seed: int, start: int, count: int) -> Iterator[tuple[Any, bytes, int]]:
        for case in range(start, start + count):
            which = case % 2
            for m, damaged in mutations(
                self.originals[which],
                seed=seed,
                count=1,
                start=case,
                structured=self.structured[which],
                donor=self.originals[1 - which],
            ):
                yield m, damaged, which

    def run(self, damaged: bytes, which: int, case: int, judge: _Judge) -> None:
        from ..format import ShardReader, iter_partial

        unchanged = damaged == self.originals[which]
        records = self.records
        reader = judge.check("open", lambda: ShardReader(damaged, name="damaged.shard"))
        if reader is not None:
            judge.check("iterate", lambda: [_plain(r) for r in reader], want=records)
            for i, (key, entries) in enumerate(records):
                want = records[i]
                judge.check(f"read({i})", lambda j: _plain(reader.read(j)), i, want=want)
                judge.check(f"get({key})", lambda k: _plain(reader.get(k)), key, want=want)
                name = sorted(entries)[case % len(entries)]
                judge.check(
                    f"read({i},[{name}])",
                    lambda j, n: _plain(reader.read(j, entries=[n])),
                    i,
                    name,
                    want=(key, {name: entries[name]}),
                )
            if judge.check("verify", reader.verify) is not None and not unchanged:
                judge.fail("verify", "a damaged shard verified clean")
        salvaged = judge.check("iter_partial", lambda: [_plain(r) for r in iter_partial(damaged)])
        if salvaged is not None and salvaged != records[: len(salvaged)]:
            judge.fail("iter_partial", "salvaged records that differ")
        self._through_catalog(damaged, which, case, unchanged, judge)
        if case % 10 == 0:
            self._through_cli(damaged, which, judge)

    def _write_in_place(self, path: Path, damaged: bytes) -> None:
        # In place (same inode), as a store's bytes change under an open catalog.
        with open(path, "r+b") as f:
            f.write(damaged)
            f.truncate(len(damaged))

    def _through_catalog(
        self, damaged: bytes, which: int, case: int, unchanged: bool, judge: _Judge
    ) -> None:
        dataset, path = f"bad-{which}", self.paths[which]
        self._write_in_place(path, damaged)
        try:
            for i in (0, 3, 7):
                key = self.keys[i]
                judge.check(
                    f"catalog.get({key})",
                    lambda k: _plain(self.catalog.get(dataset, k)),
                    key,
                    want=self.records[i],
                )
            judge.check(
                "catalog.get_many",
                lambda: [
                    _plain(r) if r is not None else None
                    for r in self.catalog.get_many(dataset, self.keys)
                ],
                want=self.records,
            )
            if case % 3 == 0:  # the slowest path: a third of the cases
                report = judge.check(
                    "catalog.verify", lambda: self.catalog.verify(dataset, workers=1)
                )
                if report is not None and report.ok and not unchanged:
                    judge.fail(
                        "catalog.verify", "a damaged shard verified clean against the catalog"
                    )
        finally:
            self._write_in_place(path, self.originals[which])

    def _through_cli(self, damaged: bytes, which: int, judge: _Judge) -> None:
        from ..cli.app import main

        path = self.paths[which].with_name("inspect.shard")
        path.write_bytes(damaged)
        out, err = io.StringIO(), io.StringIO()
        code: Any = 0
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(["inspect", "--verify", "-n", "3", str(path)])
            except SystemExit as e:
                code = e.code
        if code not in (0, 1, None) or "Traceback" in err.getvalue():
            judge.verdicts.append(("inspect", "untyped", f"exit {code}: {err.getvalue()[-300:]}"))
        else:
            judge.verdicts.append(("inspect", "refused" if code else "intact", ""))


def _tar_bytes() -> bytes:
    buf = io.BytesIO()
    rng = random.Random(11)
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for i in range(8):
            stem = f"train/{'long-directory-name-' * (4 if i == 3 else 0)}s{i:04d}"
            for ext, data in (("jpg", rng.randbytes(300 + 41 * i)), ("json", b'{"label": %d}' % i)):
                info = tarfile.TarInfo(f"{stem}.{ext}")
                info.size, info.mtime = len(data), 1
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class _Tar:
    """A WebDataset tar: scanned again, and read through the index made from the original."""

    name = "tar"

    def __init__(self, workdir: Path) -> None:
        from ..format.tar import read_tar_sample, scan_tar

        self.original = _tar_bytes()
        self.info = scan_tar(io.BytesIO(self.original), "x.tar", size=len(self.original))
        self.samples = [
            _plain(read_tar_sample(_bytes_source(self.original), self.info, i))
            for i in range(len(self.info.records))
        ]
        self.structured = [(0, 512), (len(self.original) - 1024, len(self.original))]

    def cases(self, seed: int, start: int, count: int) -> Iterator[tuple[Any, bytes, int]]:
        for m, damaged in mutations(
            self.original, seed=seed, count=count, start=start, structured=self.structured
        ):
            yield m, damaged, 0

    def run(self, damaged: bytes, which: int, case: int, judge: _Judge) -> None:
        from ..format.tar import iter_tar_samples, read_tar_sample, scan_tar

        judge.check("scan", lambda: scan_tar(io.BytesIO(damaged), "damaged.tar", size=len(damaged)))
        judge.check(
            "iter_samples",
            lambda: sum(1 for _ in iter_tar_samples(io.BytesIO(damaged), "damaged.tar")),
        )
        source = _bytes_source(damaged)
        for i, want in enumerate(self.samples):
            # The index was made from the original: a changed tar must never be served.
            judge.check(
                f"read({i})", lambda j: _plain(read_tar_sample(source, self.info, j)), i, want=want
            )


class _Taridx:
    """A TARIDX index: parsed, looked up and written back."""

    name = "taridx"

    def __init__(self, workdir: Path) -> None:
        from ..format.tar.convert import taridx_from_scans

        tar = _Tar(workdir)
        self.index = taridx_from_scans([tar.info])
        self.original = self.index.to_bytes()
        self.stems = [key for key, _ in tar.samples]
        self.structured = [(0, 64), (64, len(self.original))]

    def cases(self, seed: int, start: int, count: int) -> Iterator[tuple[Any, bytes, int]]:
        for m, damaged in mutations(
            self.original, seed=seed, count=count, start=start, structured=self.structured
        ):
            yield m, damaged, 0

    def run(self, damaged: bytes, which: int, case: int, judge: _Judge) -> None:
        from ..format.tar import read_taridx

        index = judge.check("parse", lambda: read_taridx(damaged, path="damaged.taridx"))
        if index is None:
            return
        for stem in self.stems[:3]:
            judge.check(f"lookup({stem})", index.lookup, stem)
        judge.check("sample_ranges", index.sample_ranges)
        written = judge.check("to_bytes", index.to_bytes)
        if written is not None and written != self.original:
            judge.verdicts.append(("parse", "accepted", "parses as a different index"))


def _bytes_source(data: bytes) -> Any:
    from ..format.sources import BytesSource

    return BytesSource(data, name="damaged.tar")


SUBJECTS: dict[str, Callable[[Path], Any]] = {"shard": _Shard, "tar": _Tar, "taridx": _Taridx}


# --- the worker process and its supervisor --------------------------------------------------


def _subject(name: str) -> Callable[[Path], Any]:
    """A subject by name, or ``"module:Class"`` for one of your own (tests check the harness so)."""
    if name in SUBJECTS:
        return SUBJECTS[name]
    module, _, attr = name.partition(":")
    if not attr:
        raise ValueError(
            f"unknown subject {name!r}; one of {', '.join(SUBJECTS)} or 'module:Class'"
        )
    import importlib

    return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]


def _worker(conn: Any, subject: str, seed: int, start: int, count: int, address_space: int) -> None:
    if address_space:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    with tempfile.TemporaryDirectory(prefix="shardcat-badinput-") as tmp:
        target = _subject(subject)(Path(tmp))
        for m, damaged, which in target.cases(seed, start, count):
            conn.send(("start", m.case, m.kind, m.detail))
            t0 = time.perf_counter()
            judge = _Judge()
            target.run(damaged, which, m.case, judge)
            outcome, message = judge.outcome()
            conn.send(("done", m.case, outcome, message, time.perf_counter() - t0))
    conn.send(("end",))


def run_bad_input(
    subject: str,
    count: int,
    *,
    seed: int = SEED,
    start: int = 0,
    timeout: float = 5.0,
    address_space: int = DEFAULT_ADDRESS_SPACE,
    deadline: float | None = None,
) -> RunReport:
    """Run ``count`` damaged copies of ``subject``'s files through every read path.

    ``deadline`` (seconds for the whole run) bounds a run whose cases turn
    out slower than expected: the report then holds the cases done.
    """
    _subject(subject)  # an unknown name fails here, not in the worker
    ctx = mp.get_context("spawn")
    report = RunReport()
    next_case, end = start, start + count
    stop_at = time.monotonic() + deadline if deadline else None
    while next_case < end and (stop_at is None or time.monotonic() < stop_at):
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(
            target=_worker,
            args=(child, subject, seed, next_case, end - next_case, address_space),
            daemon=True,
        )
        proc.start()
        child.close()
        current: tuple[int, str, str] | None = None
        setup_limit = 120.0  # the first message: the worker imports and builds its originals
        try:
            while True:
                if stop_at is not None and time.monotonic() > stop_at:
                    next_case = end
                    break
                if not parent.poll(timeout if current else setup_limit):
                    if current is None:
                        raise RuntimeError(
                            f"the {subject} worker did not start within {setup_limit} s"
                        )
                    report.results.append(
                        CaseResult(
                            subject,
                            current[0],
                            current[1],
                            current[2],
                            "hang",
                            f"over {timeout} s",
                            timeout,
                        )
                    )
                    next_case = current[0] + 1
                    break
                try:
                    message = parent.recv()
                except EOFError:
                    if current is None:
                        raise RuntimeError(
                            f"the {subject} worker died before its first case (exit {proc.exitcode})"
                        ) from None
                    proc.join(10)
                    report.results.append(
                        CaseResult(
                            subject,
                            current[0],
                            current[1],
                            current[2],
                            "crash",
                            f"worker exit {proc.exitcode}",
                        )
                    )
                    next_case = current[0] + 1
                    break
                if message[0] == "start":
                    current = (message[1], message[2], message[3])
                elif message[0] == "done":
                    assert current is not None and current[0] == message[1]
                    report.results.append(
                        CaseResult(
                            subject,
                            current[0],
                            current[1],
                            current[2],
                            message[2],
                            message[3],
                            message[4],
                        )
                    )
                    next_case, current = message[1] + 1, None
                else:  # "end"
                    next_case = end
                    break
        finally:
            parent.close()
            if proc.is_alive():
                proc.kill()
            proc.join(10)
    return report


def main() -> None:  # pragma: no cover - a convenience for replaying a case by hand
    import argparse

    parser = argparse.ArgumentParser(description="Replay bad-input cases of the reliability suite.")
    parser.add_argument("subject", choices=sorted(SUBJECTS))
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    report = run_bad_input(args.subject, args.count, seed=args.seed, start=args.start)
    for r in report.results:
        print(f"{r.subject} case {r.case} {r.kind} ({r.detail}): {r.outcome} {r.message}")
    os._exit(1 if report.failures else 0)


if __name__ == "__main__":  # pragma: no cover
    main()
