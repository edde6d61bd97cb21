"""The two Heralds each native test compares: one with the engine (`native_relay: auto`), one on
the Python path (`off`). Each module says how its Herald is configured through a `herald_for`
fixture (a mode in, a Herald out); the two are started and stopped here."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support.herald_process import HeraldProcess


@pytest.fixture(scope="module")
def herald_on(herald_for: Callable[[str], HeraldProcess]) -> Iterator[HeraldProcess]:
    with herald_for("auto") as proc:
        yield proc


@pytest.fixture(scope="module")
def herald_off(herald_for: Callable[[str], HeraldProcess]) -> Iterator[HeraldProcess]:
    with herald_for("off") as proc:
        yield proc
