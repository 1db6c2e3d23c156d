"""The conformance suite: one set of cases, run against every way of reaching
the store (every backend, sync and the async twin: tests/helpers/drivers.py).

Each case talks to ``store``, an object with the synchronous API. The suite
is the backend contract's spec: a new backend is one more pair of entries in
``DRIVERS``, and done when every case passes on them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.drivers import DRIVERS


@pytest.fixture(params=sorted(DRIVERS))
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """Opens stores on one root with the driver under test; closes them all after."""
    opened: list[Any] = []
    factory = DRIVERS[request.param]

    def open_() -> Any:
        store = factory(tmp_path / "store")
        opened.append(store)
        return store

    yield open_
    for store in reversed(opened):
        store.close()


@pytest.fixture
def store(open_store: Callable[[], Any]) -> Any:
    return open_store()
