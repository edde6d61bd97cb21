"""What the suite needs from the machine, and what a test does when a part is missing.

The one place where a test may be excused for want of something: each part says how it is
found and why it is missing. Locally a missing part skips the tests that need it; under
`HERALD_TEST_STRICT=1` (CI, `.ci/run`) it fails them, so a suite of skips can never pass as a
suite of tests. scripts/setup.sh installs every part on a Debian machine run as root (the
CI machine). The native extensions are parts too (tests/support/native_parts.py).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

STRICT = os.environ.get("HERALD_TEST_STRICT", "") == "1"
"""Under the strict switch a missing part fails the tests that need it."""


@dataclass(frozen=True, slots=True)
class Part:
    """One part, and why it is missing when it is."""

    present: bool
    missing: str


def absent(reason: str) -> NoReturn:
    """Stop the test for want of a part: skip, or fail under the strict switch."""
    if STRICT:
        pytest.fail(f"HERALD_TEST_STRICT=1: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def needs(part: Part) -> pytest.MarkDecorator:
    """A mark for a test or module (`pytestmark`) that needs `part`: it skips without it, and
    under the strict switch the module fails to collect instead."""
    if not part.present and STRICT:
        absent(part.missing)
    return pytest.mark.skipif(not part.present, reason=part.missing or "present")


def require(part: Part) -> None:
    """Inside a test or fixture: stop here without `part`."""
    if not part.present:
        absent(part.missing)


def binary(name: str) -> str | None:
    """Where the command `name` is: on the PATH, or in /usr/bin (Debian's packages)."""
    return shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists()
                                  else None)


def _debian_package(command: str, package: str) -> Part:
    return Part(binary(command) is not None,
                f"`{command}` is not installed (Debian's `{package}` package: scripts/setup.sh "
                f"installs it when run as root)")


def _namespaces() -> Part:
    """Whether the simulated pod can have a network namespace of its own: root, with the
    `ip` and `setpriv` commands (whether the kernel allows one is known only on trying:
    tests/support/pod_sim.py says why, through `absent`)."""
    if os.geteuid() != 0:
        return Part(False, "a network namespace for the simulated pod needs root")
    for command, package in (("ip", "iproute2"), ("setpriv", "util-linux")):
        if binary(command) is None:
            return Part(False, f"the `{command}` command ({package}) is not installed")
    return Part(True, "")


PROMETHEUS = _debian_package("prometheus", "prometheus")
PROMTOOL = _debian_package("promtool", "prometheus")
APT = _debian_package("apt-config", "apt")  # the image is assembled from Debian's archive
NAMESPACES = _namespaces()
PLATFORM = (PROMETHEUS, PROMTOOL, APT, NAMESPACES)


def missing() -> list[str]:
    """Why each missing platform part is missing (empty when all are here)."""
    return [part.missing for part in PLATFORM if not part.present]


def class_archive(path: Path) -> Path:
    """The JVM class archive (configuration/jvm_archive.py) setup makes, which must be there
    unless this JDK writes none or setup's trainer recorded why it made none: then the test
    is expected to fail for that named reason (an archive only saves CPU, and setup goes on
    without it the same way). Missing for no stated reason, it is a missing part."""
    from configuration.jvm_archive import dumping_refused, why_not_made

    refused = dumping_refused()
    if refused is not None:
        pytest.xfail(f"this JDK writes no class archive: {refused}")
    reason = why_not_made(path)
    if reason is not None:
        pytest.xfail(f"setup made no class archive {path}: {reason}")
    require(Part(path.is_file(), f"the class archive {path} is missing (scripts/setup.sh "
                                 "makes it; .cache/jvm-archives.log says how it went)"))
    return path
