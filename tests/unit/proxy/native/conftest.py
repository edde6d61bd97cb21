"""Engine rigs for the native tests: `rigs` makes socket-pair rigs and closes them afterwards."""

from __future__ import annotations

import pytest

from tests.support.native.engine import Rig


@pytest.fixture
def rigs():
    made: list[Rig] = []

    def make(*args, **kwargs) -> Rig:
        rig = Rig(*args, **kwargs)
        made.append(rig)
        return rig

    yield make
    for rig in made:
        rig.close()
