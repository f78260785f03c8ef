"""A sample's records of its base and column groups merged into one, on use (docs/GROUPS.md).

Every merge of groups makes a :class:`MergedRecord` (the point lookup, compiled
or not, batches, the general path, the streamed joins), so the merge rule is
defined here once (:func:`_merged_names`).
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, Sequence, ValuesView
from typing import Any

from ..errors import SampleDecodeError
from .entries import KEY, Entry, Record

__all__ = ["MergedRecord", "merge_records"]


_MERGED_NAMES: dict[tuple[tuple[str, ...], ...], dict[str, int]] = {}
""":func:`_merged_names`' answers by the parts' names: the records of a stream or a dataset share a few."""


def _merged_names(names: tuple[tuple[str, ...], ...]) -> dict[str, int]:
    """The merge rule: each name of the parts' ``names`` → the part whose entry it is.

    In the merged order: the base's names in write order, then each group's
    new ones; a name two parts have keeps its first place and is the newer
    part's (a later group replaces it). Cached (never changed by callers).
    """
    owners = _MERGED_NAMES.get(names)
    if owners is None:
        owners = {}
        for i, part in enumerate(names):
            owners.update(dict.fromkeys(part, i))
        if len(_MERGED_NAMES) >= 1024:  # a bound, not a policy: they are cheap to make again
            _MERGED_NAMES.clear()
        _MERGED_NAMES[names] = owners
    return owners


def merge_records(key: str, parts: Sequence[Record]) -> Record:
    """A sample's records of its base and column groups (in group order) as one record.

    A later group's entry of a name replaces an earlier one's, in its place:
    two groups share a name only where the later one was written to replace it
    (``replace_entries``; docs/GROUPS.md). Offset and length are the base's.
    The merge is made on use (:class:`MergedRecord`): a reader pays for the
    entries it asks for, as with one part's record.
    """
    return MergedRecord(key, tuple(parts))


class MergedRecord(Record):
    """The record of a sample's base and column-group parts, merged on use (:func:`merge_records`).

    The names are the base's in write order, then each group's new ones; a
    name is the newest part's that has it (:meth:`_owners`, made on first
    use). ``rec[name]`` asks that part alone, without building the others'
    entries; ``entries`` (the merged dict, which ``values()`` and
    ``items()`` read) is built on first use, once. Behaves as
    :class:`Record` in every other way.
    """

    __slots__ = ("_entries", "_owner", "_parts")

    _owner: dict[str, int] | None

    def __init__(self, key: str, parts: tuple[Record, ...]) -> None:
        base = parts[0]
        self.key = key
        self.index = -1
        self.offset = base.offset
        self.length = base.length
        self._parts = parts
        self._entries: dict[str, Entry] | None = None
        self._owner = None

    @property
    def entries(self) -> dict[str, Entry]:
        """Every entry, in the merged order (built on first use; the same dict afterwards)."""
        full = self._entries
        if full is None:
            parts = self._parts
            full = self._entries = {name: parts[i][name] for name, i in self._owners().items()}
        return full

    @entries.setter
    def entries(self, value: dict[str, Entry]) -> None:
        self._entries = value

    def _owners(self) -> dict[str, int]:
        """Each name → the part whose entry it is, in the merged order (:func:`_merged_names`)."""
        owners = self._owner
        if owners is None:
            parts = self._parts
            names = (
                (parts[0]._names(), parts[1]._names())  # one group: no comprehension
                if len(parts) == 2
                else tuple([part._names() for part in parts])
            )
            owners = self._owner = _merged_names(names)
        return owners

    def __getitem__(self, name: str) -> Entry:
        if self._entries is not None:
            return super().__getitem__(name)
        i = self._owners().get(name)
        if i is None:
            raise self._no_entry(name)
        return self._parts[i][name]

    def __contains__(self, name: object) -> bool:
        if self._entries is not None:
            return name in self._entries
        return name in self._owners()

    def __iter__(self) -> Iterator[str]:
        if self._entries is not None:
            return iter(self._entries)
        return iter(self._owners())

    def __len__(self) -> int:
        if self._entries is not None:
            return len(self._entries)
        return len(self._owners())

    def values(self) -> ValuesView[Entry]:
        # The merged dict's own view: every entry is made as it is iterated anyway.
        return self.entries.values()

    def items(self) -> ItemsView[str, Entry]:
        return self.entries.items()

    def decode(self, *, writable: bool = False) -> dict[str, Any]:
        # docstring inherited
        out: dict[str, Any] = {KEY: self.key}
        try:
            for name in self:
                out[name] = self[name].decode(writable=writable)
        except SampleDecodeError as e:
            raise self._decode_error(e, name) from e.__cause__
        return out
