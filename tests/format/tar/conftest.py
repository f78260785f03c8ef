"""Every tar format test runs under both tar walkers: the compiled loop and the Python reference."""

from __future__ import annotations

from typing import Any

import pytest

from shardcat import config
from shardcat.format.tar import tarwalker


@pytest.fixture(autouse=True, params=["compiled", "python"])
def tar_walker(request: pytest.FixtureRequest) -> Any:
    """The compiled walker must have been built; ``SHARDCAT_TAR_WALKER=python`` skips it where it cannot be."""
    name = request.param
    if name not in tarwalker.available() and config.get("tar_walker") == "python":
        pytest.skip("the compiled tar walker is not built (SHARDCAT_TAR_WALKER=python)")
    previous = tarwalker.use(name)
    yield name
    tarwalker.use(previous)
