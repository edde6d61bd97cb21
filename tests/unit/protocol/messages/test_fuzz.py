"""A short smoke run of the decoder fuzzer (the long runs are manual: see fuzz/README.md)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[4]


def test_fuzzer_smoke(tmp_path: pathlib.Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "fuzz" / "fuzz_decoders.py"),
            "--seconds",
            "2",
            "--seed",
            "1",
            "--crash-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no failures" in result.stdout
    assert not list(tmp_path.iterdir())


def test_produce_path_fuzzer_smoke(tmp_path: pathlib.Path) -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "fuzz" / "fuzz_produce.py"), "--inputs", "3000",
         "--seed", "1", "--crash-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no failures" in result.stdout
    assert "changed" in result.stdout  # some inputs went through the chain and back out
    assert not list(tmp_path.iterdir())
