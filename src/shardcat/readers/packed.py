"""Batches packed into reusable shared memory: what DataLoader workers hand the training process.

A worker that pickles a batch of sample dicts pays per sample and per
entry, and the training process pays again to rebuild them. :func:`pack_samples`
instead copies every ``bytes`` entry of a batch back to back into one block
of shared memory (with an offsets array per entry), so pickling the batch
sends only a small descriptor: the keys, the other (small) values, and
where the block is. The receiver maps the block once and hands out
zero-copy views.

Blocks come from a ring per process (:class:`BlockRing`), allocated once
and reused, so no batch costs a new segment, a passed descriptor or a new
mapping. A block is anonymous memory (``memfd_create``): it never appears
in ``/dev/shm`` and the kernel frees it when the last process that maps it
unmaps it or exits, however that process ends (no segment can leak).

Lifetime rule: a :class:`PackedBatch` and everything taken from it (its
columns, the memoryviews and arrays of its bytes, tensors made from them)
keep its block; the worker reuses a block only once all of them are gone
(reference counting, signalled through a byte in the block's header).
A job that keeps batches keeps their memory, as with any batch; copy what
you keep (``bytes(view)``, :meth:`PackedBatch.copy`) to let the rest go.

Block layout (all integers little-endian)::

    0        1            64                      64 + 8 * (n + 1) * columns
    | state  | reserved   | offsets of column 0 | ... | bytes of column 0 | ...
      0 free, 1 held        int64, n + 1 each           back to back

Linux only (``memfd_create`` and ``/proc/<pid>/fd``); elsewhere a packed
batch pickles its bytes in one piece (still one buffer, not one per sample).
"""

from __future__ import annotations

import contextlib
import itertools
import mmap
import os
import secrets
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import BatchSenderGoneError, SampleDecodeError
from ..format.entries import KEY, Record, decodes_to_bytes

__all__ = ["BlockRing", "PackedBatch", "PackedColumn", "pack_records", "pack_samples"]

HEADER = 64
"""Bytes before a block's data: the state byte, then reserved (the data starts on its own cache line)."""
FREE, HELD = 0, 1
MIN_BLOCK = 1 << 20
OFFSETS = np.dtype("<i8")

_SHARED = hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")


class _Block:
    """One reusable block: anonymous shared memory (or private, without memfd) and its mapping."""

    __slots__ = ("fd", "id", "map", "size")

    def __init__(self, block_id: int, size: int) -> None:
        self.id = block_id
        self.size = size
        self.fd: int | None = None
        if _SHARED:
            import fcntl  # Linux, as memfd_create

            self.fd = os.memfd_create(
                f"shardcat-batch-{block_id}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING
            )
            os.ftruncate(self.fd, size)
            # Mapped without mapguard's guard: shardcat made this file, and sealed, no
            # process (sender or receiver) can change its size under a mapping (SIGBUS).
            seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, seals)
            self.map = mmap.mmap(self.fd, size)
        else:
            self.map = mmap.mmap(-1, size)

    @property
    def free(self) -> bool:
        return self.map[0] == FREE

    def close(self) -> None:
        # Still viewed by a batch of this process: unmapped when that goes.
        with contextlib.suppress(BufferError):
            self.map.close()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class BlockRing:
    """The blocks one process packs batches into, reused once their batches are released.

    A block is taken for a batch (marked held) and goes back to the ring
    when the last reference to that batch's data goes, in whichever process
    holds it. The ring grows only while every block is held: a consumer that
    keeps batches keeps their blocks, never sees them overwritten.
    """

    def __init__(self, min_block: int = MIN_BLOCK) -> None:
        self.pid = os.getpid()
        self.token = f"{self.pid}-{secrets.token_hex(6)}"
        self.min_block = min_block
        self.blocks: dict[int, _Block] = {}
        self.dropped: list[int] = []  # told to receivers with the next batch sent
        self._ids = itertools.count()

    def take(self, nbytes: int) -> _Block:
        """A free block of at least ``nbytes`` of data, marked held."""
        need = HEADER + nbytes
        small = []
        for block in self.blocks.values():
            if block.free:
                if block.size >= need:
                    block.map[0] = HELD
                    return block
                small.append(block)
        for block in small:  # free but too small for batches this size: replace them
            del self.blocks[block.id]
            self.dropped.append(block.id)
            block.close()
        block = _Block(next(self._ids), max(self.min_block, 1 << (need - 1).bit_length()))
        self.blocks[block.id] = block
        block.map[0] = HELD
        return block

    def held(self) -> int:
        """How many blocks are held by batches (in this process or a receiver)."""
        return sum(not b.free for b in self.blocks.values())

    def close(self) -> None:
        for block in self.blocks.values():
            block.close()
        self.blocks.clear()


_ring: BlockRing | None = None


def process_ring() -> BlockRing:
    """This process's ring (a forked child gets its own: its parent's blocks are not its to fill)."""
    global _ring
    if _ring is None or _ring.pid != os.getpid():
        _ring = BlockRing()
    return _ring


class _Lease:
    """Held by the array over a block's data: frees the block when the last view of it goes."""

    __slots__ = ("map", "sent")

    def __init__(self, block_map: mmap.mmap) -> None:
        self.map = block_map
        self.sent = False

    def __del__(self) -> None:
        if self.sent:  # pickled to another process: the receiver's lease frees it
            return
        with contextlib.suppress(ValueError, IndexError):  # already unmapped (interpreter exit)
            self.map[0] = FREE


class _LeasedArray(np.ndarray):
    """A uint8 array over a block, carrying its lease: every slice and view keeps it alive."""

    lease: _Lease


def _leased(block_map: mmap.mmap, used: int) -> _LeasedArray:
    arr = np.frombuffer(block_map, dtype=np.uint8, count=used, offset=HEADER).view(_LeasedArray)
    arr.lease = _Lease(block_map)
    return arr


class PackedColumn:
    """The ``bytes`` values of one entry over a batch: ``column[i]`` is a zero-copy memoryview.

    ``data`` is every value back to back (a uint8 array; ``torch.from_numpy(column.data)``
    makes it one tensor without a copy) and ``offsets`` (int64, ``len + 1``)
    where each starts and ends.
    """

    __slots__ = ("_bounds", "_view", "data", "offsets")

    def __init__(self, data: np.ndarray, offsets: np.ndarray) -> None:
        self.data = data
        self.offsets = offsets
        self._view = memoryview(data.data)
        self._bounds: list[int] | None = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def _offsets(self) -> list[int]:
        if self._bounds is None:
            self._bounds = self.offsets.tolist()
        return self._bounds

    def __getitem__(self, i: int) -> memoryview:
        b = self._offsets()
        return self._view[b[i] : b[i + 1]]

    def __iter__(self) -> Iterator[memoryview]:
        view, b = self._view, self._offsets()
        for i in range(len(b) - 1):
            yield view[b[i] : b[i + 1]]


class PackedBatch:
    """A batch of samples whose ``bytes`` entries live in one shared-memory block.

    ``len(batch)`` samples; ``batch[i]`` (and iteration) gives sample dicts
    whose ``bytes`` entries are memoryviews; ``batch[name]`` gives a whole
    entry: ``batch["__key__"]`` the keys, a ``bytes`` entry as a
    :class:`PackedColumn`, any other entry as the list of its values.
    The block is released when the batch and every view taken from it are
    gone (see the module's lifetime rule); :meth:`copy` detaches a batch.
    """

    __slots__ = ("__weakref__", "_lease", "_reduce", "columns", "keys", "names", "values")

    def __init__(
        self,
        keys: list[str],
        names: tuple[str, ...],
        columns: dict[str, PackedColumn],
        values: dict[str, list[Any]],
        lease: _Lease | None = None,
        reduce: tuple[Any, ...] | None = None,
    ) -> None:
        self.keys = keys
        self.names = names
        self.columns = columns
        self.values = values
        self._lease = lease
        self._reduce = reduce

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, item: int | str) -> Any:
        if isinstance(item, str):
            if item == KEY:
                return self.keys
            if item in self.columns:
                return self.columns[item]
            return self.values[item]
        return self.sample(item)

    def __contains__(self, name: object) -> bool:
        return name == KEY or name in self.columns or name in self.values

    def sample(self, i: int) -> dict[str, Any]:
        """Sample ``i`` as a dict, its ``bytes`` entries as memoryviews of the block."""
        out: dict[str, Any] = {KEY: self.keys[i]}
        for name in self.names:
            col = self.columns.get(name)
            out[name] = col[i] if col is not None else self.values[name][i]
        return out

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self.sample(i) for i in range(len(self.keys)))

    def copy(self) -> list[dict[str, Any]]:
        """The samples as plain dicts with ``bytes`` values: they keep no block."""
        return [
            {k: bytes(v) if isinstance(v, memoryview) else v for k, v in s.items()} for s in self
        ]

    def pin_memory(self) -> PackedBatch:
        """As it is: ``DataLoader(pin_memory=True)`` calls this (pin tensors made from it instead)."""
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        if self._reduce is None:
            raise TypeError("this PackedBatch was received: pickle batch.copy() instead")
        if self._lease is not None:
            self._lease.sent = True  # the receiver's lease frees the block now
        return self._reduce

    def __repr__(self) -> str:
        return f"PackedBatch({len(self)} samples, columns {list(self.columns)}, values {list(self.values)})"


def pack_samples(samples: Sequence[Mapping[str, Any]]) -> PackedBatch:
    """A batch of sample dicts packed: every all-``bytes`` entry into one block of this process's ring.

    A collate function: ``ShardIterableDataset(batch_size=64, collate=pack_samples)``.

    Raises
    ------
    TypeError
        A sample is not a dict (e.g. a ``decode`` that returns something else).
    ValueError
        The batch is empty, or its samples do not all have the same entries.
    """
    if not samples:
        raise ValueError("pack_samples needs at least one sample")
    first = samples[0]
    if not isinstance(first, Mapping) or KEY not in first:
        raise TypeError(
            f"pack_samples packs sample dicts with a {KEY!r}, not {type(first).__name__}"
        )
    names = tuple(k for k in first if k != KEY)
    if any(len(s) != len(first) for s in samples):
        raise ValueError("pack_samples needs the same entries in every sample")
    packed: list[tuple[str, list[Any]]] = []
    values: dict[str, list[Any]] = {}
    for name in names:
        try:
            col = [s[name] for s in samples]
        except KeyError as e:
            raise ValueError(
                f"a sample has no entry {name!r} that {first[KEY]!r} has: pack_samples needs "
                "the same entries in every sample"
            ) from e
        if all(type(v) is bytes for v in col):
            packed.append((name, col))
        else:
            values[name] = col
    return _assemble([s[KEY] for s in samples], names, packed, values)


def pack_records(
    records: Sequence[Record], decode: Mapping[str, Callable[[Any], Any]] | None = None
) -> PackedBatch:
    """Records read from shards packed as :func:`pack_samples` packs their decoded samples.

    The same batch, made without the sample dicts: entries that decode to
    their bytes are copied from the read buffers straight into the block
    (no ``bytes`` object per entry); the others are decoded (``writable``
    arrays), each through ``decode[name]`` when given.
    """
    first = records[0]
    names = tuple(first.entries)
    if any(len(r.entries) != len(names) for r in records):
        return pack_samples([_decoded(r, decode) for r in records])
    packed: list[tuple[str, list[Any]]] = []
    values: dict[str, list[Any]] = {}
    for name in names:
        try:
            entries = [r.entries[name] for r in records]
        except KeyError:
            return pack_samples([_decoded(r, decode) for r in records])
        kind = entries[0].content_type
        fn = None if decode is None else decode.get(name)
        if fn is None and decodes_to_bytes(kind) and all(e.content_type == kind for e in entries):
            packed.append((name, [e.view for e in entries]))
            continue
        try:
            col = [e.decode(writable=True) for e in entries]
        except SampleDecodeError as e:
            raise _bad_entry(e, records, name) from e.__cause__
        if fn is not None:
            col = [fn(v) for v in col]
        if all(type(v) is bytes for v in col):
            packed.append((name, col))
        else:
            values[name] = col
    return _assemble([r.key for r in records], names, packed, values)


def _bad_entry(error: SampleDecodeError, records: Sequence[Record], name: str) -> SampleDecodeError:
    """``error``, naming the first record whose entry ``name`` does not decode."""
    for record in records:
        try:
            record.entries[name].decode()
        except SampleDecodeError as e:
            return record._decode_error(e, name)
    return error.locate(entry=name)


def _decoded(record: Record, decode: Mapping[str, Callable[[Any], Any]] | None) -> dict[str, Any]:
    sample = record.decode(writable=True)
    for name, fn in (decode or {}).items():
        if name in sample:
            sample[name] = fn(sample[name])
    return sample


def _assemble(
    keys: list[str],
    names: tuple[str, ...],
    packed: list[tuple[str, list[Any]]],
    values: dict[str, list[Any]],
) -> PackedBatch:
    """The batch, its ``packed`` columns (buffers) copied into a block of this process's ring."""
    n = len(keys)
    sizes = [[len(v) for v in col] for _, col in packed]
    index_bytes = 8 * (n + 1) * len(packed)
    used = index_bytes + sum(map(sum, sizes))
    ring = process_ring()
    block = ring.take(used)
    whole = _leased(block.map, used)
    view = whole.data
    layout = []
    columns = {}
    pos = index_bytes
    for c, ((name, col), size) in enumerate(zip(packed, sizes)):
        at = 8 * (n + 1) * c
        offsets = whole[at : at + 8 * (n + 1)].view(OFFSETS)
        offsets[0] = 0
        np.cumsum(size, out=offsets[1:])
        p = pos
        for v, q in zip(col, offsets[1:].tolist()):
            view[p : pos + q] = v
            p = pos + q
        columns[name] = PackedColumn(whole[pos:p], offsets)
        layout.append((name, at, pos, p - pos))
        pos = p
    return sealed(ring, block, whole, used, keys, names, layout, columns, values)


def sealed(
    ring: BlockRing,
    block: _Block,
    whole: _LeasedArray,
    used: int,
    keys: list[str],
    names: tuple[str, ...],
    layout: Sequence[tuple[str, int, int, int]],
    columns: dict[str, PackedColumn],
    values: dict[str, list[Any]],
) -> PackedBatch:
    """The batch over ``block`` (its first ``used`` data bytes sent), pickling to a descriptor.

    ``layout`` names, per column, where its offsets (``at``) and its bytes
    (``pos``, ``length``) lie in the block's data; ``whole`` is the leased
    array over that data.
    """
    dropped, ring.dropped = ring.dropped, []
    if block.fd is not None:
        where = (ring.token, ring.pid, block.fd, block.id, block.size, tuple(dropped))
        payload: bytes | None = None
    else:
        where, payload = None, whole[:used].tobytes()
    reduce = (_received, (where, payload, used, keys, names, tuple(layout), values))
    # Sent as a descriptor, the block is the receiver's to free; sent as a payload, still ours.
    sent_lease = whole.lease if where is not None else None
    return PackedBatch(keys, names, columns, values, sent_lease, reduce)


# --- the receiving side ------------------------------------------------------

_maps: dict[str, tuple[int, dict[int, mmap.mmap]]] = {}
"""Blocks mapped from other processes' rings: token → (sender pid, block id → mapping)."""


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (an exited, unreaped worker counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


_maps_lock = threading.Lock()
"""Batches may be unpickled by several threads at once (DataLoader pin-memory threads)."""


def _map_block(where: tuple[str, int, int, int, int, tuple[int, ...]]) -> mmap.mmap:
    with _maps_lock:
        return _map_block_locked(where)


def _map_block_locked(where: tuple[str, int, int, int, int, tuple[int, ...]]) -> mmap.mmap:
    token, pid, fd, block_id, size, dropped = where
    ring = _maps.get(token)
    if ring is None:
        # A new sender: forget the blocks of senders that have exited (workers of past
        # epochs, killed ones); batches still held keep their own mappings alive.
        for old in [t for t, (p, _) in _maps.items() if not _alive(p)]:
            del _maps[old]
        ring = _maps[token] = (pid, {})
    blocks = ring[1]
    for d in dropped:
        blocks.pop(d, None)
    block_map = blocks.get(block_id)
    if block_map is None:
        local = _ring if _ring is not None and _ring.token == token else None
        if local is not None and block_id in local.blocks:
            block_map = local.blocks[block_id].map
        else:
            try:
                opened = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR)
            except FileNotFoundError as e:
                raise BatchSenderGoneError(
                    f"the process (pid {pid}) that packed this batch exited before it was "
                    "received (a killed DataLoader worker?): its shared memory went with it"
                ) from e
            try:
                block_map = mmap.mmap(opened, size)
            finally:
                os.close(opened)
        blocks[block_id] = block_map
    return block_map


def _received(
    where: tuple[str, int, int, int, int, tuple[int, ...]] | None,
    payload: bytes | None,
    used: int,
    keys: list[str],
    names: tuple[str, ...],
    layout: tuple[tuple[str, int, int, int], ...],
    values: dict[str, list[Any]],
) -> PackedBatch:
    n = len(keys)
    if where is not None:
        whole: np.ndarray = _leased(_map_block(where), used)
        lease: _Lease | None = whole.lease  # type: ignore[attr-defined]
    else:
        whole, lease = np.frombuffer(payload or b"", dtype=np.uint8), None
    columns = {
        name: PackedColumn(whole[pos : pos + length], whole[at : at + 8 * (n + 1)].view(OFFSETS))
        for name, at, pos, length in layout
    }
    return PackedBatch(keys, names, columns, values, lease)
