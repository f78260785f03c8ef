"""Planner statistics after a bulk commit (PostgreSQL).

PostgreSQL plans batch lookups from table statistics that autovacuum
refreshes only some time after a bulk load; until then ``get_many`` can run
a plan made for a much smaller table (seconds instead of milliseconds: see
docs/RELIABILITY.md, the soak). So a commit that grows ``records`` by a
large fraction runs ``ANALYZE`` itself, after its transaction (the commit
never waits on it, and a failure only logs a warning).
"""

from __future__ import annotations

import logging

from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

__all__ = ["ANALYZE_GROWTH", "ANALYZE_MIN_ROWS", "refresh_after_growth"]

log = logging.getLogger(__name__)

ANALYZE_MIN_ROWS = 50_000
"""A commit of fewer records never analyzes (autovacuum keeps up with small ones)."""
ANALYZE_GROWTH = 0.2
"""... nor one that adds at most this fraction of the rows the statistics know of."""

# A partitioned records' (catalog/partitions.py) reltuples is its parent's, set by the
# ANALYZE below only (autovacuum analyzes the partitions, never the parent): what the
# statistics the batch's plan reads know of.
_KNOWN_ROWS = "SELECT reltuples FROM pg_class WHERE oid = to_regclass('records')"


def refresh_after_growth(engine: Engine, added: int) -> bool:
    """ANALYZE ``records`` and ``shards`` if ``added`` committed records outgrew the statistics.

    Cheap when it does nothing: no query below ``ANALYZE_MIN_ROWS``, else
    one catalog lookup of the planner's row count (``pg_class.reltuples``,
    -1 when never analyzed). Returns whether it analyzed.
    """
    if engine.dialect.name != "postgresql" or added < ANALYZE_MIN_ROWS:
        return False
    try:
        with engine.begin() as conn:
            known = conn.execute(text(_KNOWN_ROWS)).scalar()
            if known is not None and known > 0 and added <= ANALYZE_GROWTH * known:
                return False
            conn.execute(text("ANALYZE records"))
            conn.execute(text("ANALYZE shards"))
    except SQLAlchemyError as e:  # the commit landed: stale statistics only slow lookups
        log.warning("could not refresh the planner's statistics after a bulk commit: %s", e)
        return False
    log.info("analyzed records after a commit of %d records (statistics knew %s)", added, known)
    return True
