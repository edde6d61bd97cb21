"""The `.pyi` of each C extension says what the built module has: the type checker trusts the
stub, so a stub that drifted from the C (a function renamed, an argument added) would let
wrong calls pass the checker. mypy's stubtest compares the two."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.native_parts import native_module

# Types the stubs declare for the checker alone (the shapes of the plans the Python side
# builds): the C has no such names.
STUB_ONLY = ("proxy.native._relay.ColumnWire", "proxy.native._relay.Counts",
             "proxy.native._relay.LinksWire", "proxy.native._relay.PlanWire")


@pytest.mark.parametrize("module", ["protocol._stamp", "proxy.native._relay"])
def test_the_stub_matches_the_built_extension(module: str, tmp_path) -> None:
    native_module(module)
    allow = tmp_path / "allowlist"
    allow.write_text("\n".join(STUB_ONLY) + "\n")
    result = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", module, "--allowlist", str(allow),
         "--ignore-unused-allowlist"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
