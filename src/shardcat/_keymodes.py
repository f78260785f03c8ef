"""The key modes a dataset is created with: what its catalog keeps of each key.

Defined here, free of every import, so that the command line can offer them
(``--keys``) without loading the catalog; :mod:`shardcat.catalog.hashkeys`
says what each one means and checks them.
"""

from __future__ import annotations

__all__ = ["KEY_MODES"]

KEY_MODES = ("text", "hash", "unsorted")
"""Text and hash, the text in key order (``text``); only the hash (``hash``); text and hash, the
text in no index (``unsorted``). ``datasets.key_mode`` holds one (at most 8 characters)."""
