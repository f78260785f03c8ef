"""No secret of a catalog URL is printed: the shapes that leaked before, through every command.

Each shape's URL (a bad port, URL-special characters, an ``@`` in the
password, a real PostgreSQL server's password in the URL or its query) goes
to every command, by ``--catalog``, ``$SHARDCAT_CATALOG`` or a ``--config``
file, with and without ``-v``/``-vv`` and ``--json``; the other shapes take
one command per way to the catalog (test_no_secrets_catalog_paths.py).
The cases, the runners and the ``world`` they run in: tests/cli/nosecrets.py
and tests/cli/conftest.py.
"""

from __future__ import annotations

import pytest

from .nosecrets import CATALOG_SHAPES, EVERY_COMMAND, catalog_shape_problems

pytestmark = pytest.mark.usefixtures("fresh_demo_folder")


@pytest.mark.parametrize("shape", [s for s in CATALOG_SHAPES if s in EVERY_COMMAND])
def test_catalog_url_secrets_are_never_printed(world, shape):
    problems = catalog_shape_problems(world, shape)
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems[:40])
