"""`proxy/native/_relay.pyi` matches the built relay (tests/support/stub_check.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.stub_check import stub_differences

# The shapes of the plans the Python side builds, declared for the checker alone.
STUB_ONLY = ("ColumnWire", "Counts", "LinksWire", "PlanWire")


def test_the_relays_stub_matches_the_built_extension(tmp_path: Path) -> None:
    assert stub_differences("proxy.native._relay", STUB_ONLY, tmp_path) == ""
