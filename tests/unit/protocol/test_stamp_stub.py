"""`protocol/_stamp.pyi` matches the built stamper (tests/support/stub_check.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.stub_check import stub_differences


def test_the_stampers_stub_matches_the_built_extension(tmp_path: Path) -> None:
    assert stub_differences("protocol._stamp", (), tmp_path) == ""
