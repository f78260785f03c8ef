"""Can this process reach a folder's store? Asked before a job schedules any work.

A job that writes into a missing bucket, or with a wrong secret, would
otherwise find out from its first task, after a worker built a whole shard,
in the worker's log. Asking the store about the folder says it first: it
needs the bucket to exist and the credentials to be accepted. The question
is bounded whatever the folder holds: the filesystem's ``info`` (S3: a
HEAD and one listing of at most one key; Azure: a properties request and
one listing page of one blob; GCS: an object GET and a listing of at most one
object), never a listing of a dataset's shards,
which a job on a large dataset would otherwise pay on the client and on
every worker. Transient failures are retried under the one policy
(:mod:`.retry`).

Local folders and ``memory://`` are not asked (nothing there to be refused
that the job would not meet at once); HTTP is read-only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ShardNotFoundError
from .fs import BUCKET_PROTOCOLS, protocol_of, resolve
from .sources import retried
from .translate import translate

__all__ = ["check_folder"]

# Stores whose listing of a missing bucket says only "no such file" (adlfs; gcsfs turns
# every 404 into a bare FileNotFoundError): the bucket is asked for. gcsfs asks for it by
# listing it when a key may not read the bucket's metadata, so no permission of its own is needed.
_ASK_FOR_BUCKET = frozenset({"az", "abfs", "abfss", "gs", "gcs"})


def check_folder(url: str, storage_options: Mapping[str, Any] | None = None) -> None:
    """Raise shardcat's error if the store of folder ``url`` cannot be listed.

    A folder that does not exist yet is fine when its bucket does.

    Raises
    ------
    BucketNotFoundError
        The bucket (container) does not exist.
    StorageCredentialsError
        The store refused the credentials, or none were found.
    StorageUnreachableError
        The store did not answer within ``storage_retry_deadline``.
    StorageError
        Another failure of the store, or a URL that cannot be opened.
    """
    if protocol_of(url) not in BUCKET_PROTOCOLS:
        return
    fs, path = resolve(url, dict(storage_options or {}))
    fs.invalidate_cache(path)  # a listing cached by an earlier job is no answer from the store
    try:
        retried(fs, "info", url, path)
    except Exception as e:
        # S3 says "no such bucket" in the listing's own error; asking for the bucket could be
        # refused to a key that may list its folder (HeadBucket is a permission of its own),
        # so only Azure and GCS (whose listings say "no such file" for both) are asked.
        error = translate(e, url, fs=fs if protocol_of(url) in _ASK_FOR_BUCKET else None)
        if type(error) is ShardNotFoundError:
            return  # no object under the folder yet, in a bucket that exists
        raise error from e
