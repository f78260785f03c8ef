"""What scanning a tar yields: per-sample values, and a per-tar summary for the catalog."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..footer import EntrySpec
from ..info import InPlaceShardInfo
from .spec import BLOCK

__all__ = ["TarEntry", "TarSample", "TarShardInfo"]


@dataclass(frozen=True, slots=True)
class TarEntry:
    """One member of a sample: ``img/0001.seg.png`` is entry ``seg.png`` of key ``img/0001``."""

    name: str
    """The member name after the first dot of its basename, lower-cased (as WebDataset does)."""
    content_type: str
    """Guessed from ``name`` exactly as for native entries."""
    payload_offset: int
    """The payload's first byte in the tar; the member's own 512-byte header ends here."""
    size: int
    crc: int
    """CRC32C of the payload, computed while scanning."""

    @property
    def header_offset(self) -> int:
        """The member's own ustar header (what TARIDX stores as ``offset``)."""
        return self.payload_offset - BLOCK


@dataclass(frozen=True, slots=True)
class TarSample:
    """A WebDataset sample: adjacent members sharing one key."""

    key: str
    offset: int
    """The first member's first header (a pax or GNU long-name header when it has one)."""
    length: int
    """Up to the end of the last member's payload (its padding excluded)."""
    entries: tuple[TarEntry, ...]

    @property
    def end(self) -> int:
        return self.offset + self.length


@dataclass(frozen=True, slots=True)
class TarShardInfo(InPlaceShardInfo):
    """Summary of one scanned tar, shaped like :class:`~shardcat.format.ShardInfo`.

    ``records``, ``entries`` and ``specs`` use the native footer's row
    layouts, so the catalog registers a tar the way it registers a shard: a
    record's ``offset``/``length`` are its byte range in the tar, each entry
    row's ``offset`` is the payload's offset inside that range, with its size
    and CRC32C; ``spec`` indexes ``specs`` (name, content type, codec
    ``none``). Every array is in archive order. ``size`` counts every byte
    of the file (end-of-archive blocks and padding included);
    ``shard_number`` is the catalog's: a tar has none of its own;
    ``index_tar`` sets it from the URL's trailing digits when no other tar
    of the job has the same.
    """

    end_offset: int = 0
    """Where the end-of-archive block starts."""
    member_count: int = 0
    """Members seen, extension headers not counted."""
    skipped: int = 0
    """Members that are not sample entries: directories, links, other types, names without a key."""

    def payload_offsets(self) -> np.ndarray:
        """Each entry's payload offset in the tar (uint64, archive order)."""
        counts = self.records["entry_count"].astype(np.int64)
        base = np.repeat(self.records["offset"], counts)
        out: np.ndarray = base + self.entries["offset"]
        return out

    def spans(self, index: int) -> list[tuple[int, int, int]]:
        """``(offset in record, size, crc)`` of record ``index``'s entries, in order."""
        starts = self.entry_starts()
        rows = self.entries[int(starts[index]) : int(starts[index + 1])]
        return [(int(r["offset"]), int(r["size"]), int(r["crc"])) for r in rows]

    def layout(self, index: int) -> list[EntrySpec]:
        """The entry specs of record ``index``, in order."""
        starts = self.entry_starts()
        ids = self.entries["spec"][int(starts[index]) : int(starts[index + 1])]
        return [self.specs[i] for i in ids.tolist()]

    def samples(self) -> list[TarSample]:
        """Every sample as a :class:`TarSample` (for inspection; the arrays are the bulk form)."""
        out: list[TarSample] = []
        starts = self.entry_starts().tolist()
        offsets = self.records["offset"].tolist()
        lengths = self.records["length"].tolist()
        rows = self.entries.tolist()
        for i, key in enumerate(self.keys):
            base = offsets[i]
            entries = []
            for off, size, crc, spec, _ in rows[starts[i] : starts[i + 1]]:
                s = self.specs[spec]
                entries.append(TarEntry(s.name, s.content_type, base + off, size, crc))
            out.append(TarSample(key, base, lengths[i], tuple(entries)))
        return out
