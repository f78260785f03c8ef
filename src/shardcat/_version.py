"""The package version: its one source (``pyproject.toml`` reads it, the writer stamps it)."""

from __future__ import annotations

__version__ = "0.1.0"
