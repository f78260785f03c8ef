"""No secret of a catalog URL is printed: more shapes, one command per way to the catalog.

The shapes not sent through every command (test_no_secrets_catalog.py): a
bad IPv6 host, a URL that does not parse, a server that is not there,
``?password=``, another driver, SQLite with a query; each through one
command per way to the catalog (ONE_PER_PATH), by ``--catalog``,
``$SHARDCAT_CATALOG`` or a ``--config`` file, with and without
``-v``/``-vv`` and ``--json``. The cases, the runners and the ``world`` they
run in: tests/cli/nosecrets.py and tests/cli/conftest.py.
"""

from __future__ import annotations

import pytest

from .nosecrets import CATALOG_SHAPES, EVERY_COMMAND, catalog_shape_problems

pytestmark = pytest.mark.usefixtures("fresh_demo_folder")


@pytest.mark.parametrize("shape", [s for s in CATALOG_SHAPES if s not in EVERY_COMMAND])
def test_catalog_url_secrets_are_never_printed(world, shape):
    problems = catalog_shape_problems(world, shape)
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems[:40])
