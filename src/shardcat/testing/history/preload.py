"""Imported once by the history's fork server, before it forks any process (see ``runner``)."""

from __future__ import annotations

from .worker import warm_up

warm_up()
