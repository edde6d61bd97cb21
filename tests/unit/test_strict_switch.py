"""`HERALD_TEST_STRICT=1` (CI): a native part that is not built fails the run instead of
turning its tests into skips. Shown on a real pytest run of a native test module, in a
Python where the extensions cannot be imported, as after a failed optional build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.herald_process import REPO

NATIVE_MODULE = "tests/unit/proxy/native/test_native_relay_engine.py"  # every test needs the engine

# Loaded into the pytest run before the test modules: the extensions fail to import.
UNBUILT = '''
import sys

class Unbuilt:
    def find_spec(self, name, path=None, target=None):
        if name in ("proxy.native._relay", "protocol._stamp"):
            raise ImportError(f"{name} is not built here")
        return None

sys.meta_path.insert(0, Unbuilt())
'''


def _pytest(tmp_path: Path, strict: bool) -> subprocess.CompletedProcess:
    (tmp_path / "unbuilt_extensions.py").write_text(UNBUILT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path)])}
    env.pop("HERALD_TEST_STRICT", None)
    if strict:
        env["HERALD_TEST_STRICT"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
         "unbuilt_extensions", "-rs", NATIVE_MODULE],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_without_the_switch_a_missing_engine_skips_and_says_why(tmp_path: Path) -> None:
    run = _pytest(tmp_path, strict=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "passed" not in run.stdout and "skipped" in run.stdout
    assert "the native relay (proxy.native._relay) is not built" in run.stdout


def test_under_the_switch_a_missing_engine_fails_the_run(tmp_path: Path) -> None:
    run = _pytest(tmp_path, strict=True)
    assert run.returncode != 0
    output = run.stdout + run.stderr
    assert "HERALD_TEST_STRICT=1 and a required part is missing" in output
    assert "the native relay (proxy.native._relay) is not built" in output
    assert "the record stamper (protocol._stamp) is not built" in output
    assert "skipped" not in run.stdout
