"""Local stand-ins for the reader's own servers, so that docs/CLUSTER.md's commands run as written.

The document speaks of a PostgreSQL at ``db.internal``, a bucket
``s3://your-bucket`` (and raw files under ``s3://raw/images/``) and a Dask
scheduler at ``scheduler-host:8786``. Blocks marked ``<!-- stand-ins: ... -->``
run with those names replaced by real servers on 127.0.0.1:

* a database of its own on the test PostgreSQL, owned by a ``shardcat`` role
  (trust authentication, so the document's ``PASSWORD`` is accepted as is);
* a moto S3 server holding the two buckets; every process finds it through
  ``AWS_ENDPOINT_URL``, the standard variable botocore reads, exactly as the
  document tells readers to give endpoints through the environment;
* ``dask scheduler`` and two ``dask worker`` processes started from the
  command line, with that environment.

Everything is removed afterwards; every wait is bounded.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT = 60.0  # seconds for the scheduler and its workers to come up
RAW_FILES = 24  # files under s3://raw/images/ and ./images


@dataclass
class StandIns:
    """The replacements for a document's placeholders and the environment its commands run in."""

    replacements: dict[str, str]
    env: dict[str, str]
    scheduler: str
    workspace_files: dict[str, bytes] = field(default_factory=dict)

    def apply(self, text: str) -> str:
        for placeholder, real in self.replacements.items():
            text = text.replace(placeholder, real)
        return text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _images() -> dict[str, bytes]:
    """A small folder of files as a reader would pack: a few kinds, distinct bytes."""
    files: dict[str, bytes] = {}
    for i in range(RAW_FILES):
        files[f"img{i:04d}.png"] = b"\x89PNG\r\n\x1a\n" + os.urandom(2048 + 97 * i)
        if i % 3 == 0:
            files[f"img{i:04d}.json"] = f'{{"label": {i % 5}}}'.encode()
    return files


@contextmanager
def _moto(env: dict[str, str], files: dict[str, bytes]) -> Iterator[str]:
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=env["AWS_DEFAULT_REGION"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        )
        for bucket in ("your-bucket", "raw"):
            s3.create_bucket(Bucket=bucket)
        for name, data in files.items():
            s3.put_object(Bucket="raw", Key=f"images/{name}", Body=data)
        yield endpoint
    finally:
        server.stop()


@contextmanager
def _database(server_url: str) -> Iterator[str]:
    """A fresh database owned by role ``shardcat``; yields its name."""
    import sqlalchemy as sa

    name = f"datasets_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            exists = conn.execute(sa.text("SELECT 1 FROM pg_roles WHERE rolname = 'shardcat'"))
            if exists.first() is None:
                conn.execute(sa.text("CREATE ROLE shardcat LOGIN"))
            conn.execute(sa.text(f'CREATE DATABASE "{name}" OWNER shardcat'))
        yield name
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _dask_command(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "dask"), *args]


@contextmanager
def _processes(commands: list[list[str]], env: dict[str, str], cwd: Path) -> Iterator[None]:
    procs = [
        subprocess.Popen(
            cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for cmd in commands
    ]
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)


def _wait_for_workers(address: str, n: int) -> None:
    from distributed import Client

    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            with Client(address, timeout=5) as client:
                client.wait_for_workers(n, timeout=max(1.0, deadline - time.monotonic()))
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@contextmanager
def stand_ins(postgres_server: str, workdir: Path) -> Iterator[StandIns]:
    """Start the stand-ins; ``postgres_server`` is an SQLAlchemy URL of the test PostgreSQL."""
    import sqlalchemy as sa

    pg = sa.make_url(postgres_server)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHARDCAT_", "DASK_", "AWS_"))}
    env.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
    )
    files = _images()
    with ExitStack() as stack:
        endpoint = stack.enter_context(_moto(env, files))
        env["AWS_ENDPOINT_URL"] = endpoint
        database = stack.enter_context(_database(postgres_server))
        port = _free_port()
        scheduler = f"tcp://127.0.0.1:{port}"
        workdir.mkdir(parents=True, exist_ok=True)
        stack.enter_context(
            _processes(
                [
                    _dask_command(
                        "scheduler",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(port),
                        "--dashboard-address",
                        "127.0.0.1:0",
                        "--no-show",
                    ),
                    *(
                        _dask_command(
                            "worker",
                            scheduler,
                            "--nthreads",
                            "1",
                            "--memory-limit",
                            "2GiB",
                            "--no-dashboard",
                            "--local-directory",
                            str(workdir / f"worker-{i}"),
                        )
                        for i in range(2)
                    ),
                ],
                env,
                workdir,
            )
        )
        _wait_for_workers(scheduler, 2)
        yield StandIns(
            replacements={
                "db.internal:5432/datasets": f"{pg.host}:{pg.port or 5432}/{database}",
                "tcp://scheduler-host:8786": scheduler,
            },
            env=env,
            scheduler=scheduler,
            workspace_files={f"images/{name}": data for name, data in files.items()},
        )
