"""Whether a C extension's `.pyi` says what the built module has: the type checker trusts
the stub, so a stub that drifted from the C (a function renamed, an argument added) would let
wrong calls pass the checker. mypy's stubtest compares the two."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.native_parts import native_module


def stub_differences(module: str, stub_only: tuple[str, ...], tmp: Path) -> str:
    """stubtest's report for `module` (empty when the stub matches); `stub_only` are names
    the stub declares for the checker alone, which the C has no reason to define."""
    native_module(module)
    allow = tmp / "allowlist"
    allow.write_text("".join(f"{module}.{name}\n" for name in stub_only))
    result = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", module, "--allowlist", str(allow),
         "--ignore-unused-allowlist"],
        capture_output=True, text=True, timeout=300)
    return "" if result.returncode == 0 else result.stdout[-4000:] + result.stderr[-2000:]
