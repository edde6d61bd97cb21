"""Class-data archives for the JVMs the project starts: Kafka's broker and tools, Spark's driver.

A JVM started with an archive of the classes an earlier run of the same classpath loaded maps
them from one file instead of reading, parsing and verifying each from its jar (JDK 17's
dynamic class-data sharing, JEP 350). For a Kafka broker that is a third of its start-up CPU,
for a Spark driver more; the test suite starts a few hundred such JVMs.

An archive is kept in the cache folder under a name made from the classpath's jars (their
names, sizes and modification times), so a changed jar means another archive and never a stale
one. A JVM writes its archive when it exits (`dump_flags`); `commit` moves it into place only
after that JVM exited of itself or on SIGTERM, because a JVM handed a truncated archive dies
of SIGBUS. Without an archive, or with one this JVM cannot use (another JDK), a JVM starts as
it would have: `use_flags` silences the warning it would print, since tools print their
output on the same stdout. An archive saves CPU and nothing depends on it, so a JDK that
writes none (`dumping_refused` says why) only means JVMs that start as they always did.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

from configuration.cache import cache_root

FOLDER = "jvm-archives"
CLEAN_EXITS = frozenset({0, 143, -15})
"""Exit statuses after which a JVM has written its whole archive: of itself, or on SIGTERM
(a JVM's shutdown reports 143; `subprocess` reports a signal it saw as -15)."""


def _jars(entry: str) -> list[Path]:
    """The files a `-cp` entry names: a `folder/*` wildcard is every jar in the folder."""
    if entry.endswith("*"):
        folder = Path(entry[:-1] or ".")
        return sorted(folder.glob("*.jar")) + sorted(folder.glob("*.JAR"))
    return [Path(entry)]


def archive_path(name: str, classpath: Iterable[str]) -> Path:
    """Where the archive of JVMs called `name` on `classpath` (its `-cp` entries) is kept."""
    digest = hashlib.sha256()
    for entry in classpath:
        for jar in _jars(entry):
            try:
                st = jar.stat()
            except OSError:
                digest.update(f"{jar}:missing\n".encode())
                continue
            digest.update(f"{jar}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return cache_root() / FOLDER / f"{name}-{digest.hexdigest()[:16]}.jsa"


def use_flags(archive: Path) -> list[str]:
    """The flags that start a JVM from `archive`, if it exists; none otherwise."""
    if not archive.is_file():
        return []
    return [f"-XX:SharedArchiveFile={archive}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def _pending(archive: Path) -> Path:
    return archive.with_name(f"{archive.name}.{os.getpid()}.tmp")


def dump_flags(archive: Path) -> list[str]:
    """The flags that make a JVM write its loaded classes, at exit, for `commit(archive)`.
    The JVM's own warnings about the dump stay on: they are the only account of a dump that
    wrote nothing."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    return [f"-XX:ArchiveClassesAtExit={_pending(archive)}"]


@functools.cache
def dumping_refused(java: str = "java") -> str | None:
    """Why `java` writes no class archive (its own words), or None when it writes one: a
    JDK without its base archive (`lib/server/classes.jsa`), or one that cannot map it, writes
    none, and a trainer says so instead of failing in a way nobody can read."""
    with tempfile.TemporaryDirectory() as folder:
        probe = Path(folder) / "probe.jsa"
        try:
            run = subprocess.run([java, f"-XX:ArchiveClassesAtExit={probe}", "-version"],
                                 capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{java} -version did not run: {exc}"
        if probe.is_file() and probe.stat().st_size > 0:
            return None
        said = " | ".join(line.strip() for line in (run.stdout + run.stderr).splitlines()[-3:])
        return f"`{java} -version` (exit {run.returncode}) wrote no class archive: {said}"


def commit(archive: Path, exit_status: int) -> bool:
    """Put the archive the JVM started with `dump_flags(archive)` (by this process) in place,
    now that it exited with `exit_status`; False, and nothing kept, if it did not exit
    cleanly or wrote nothing (`not_committed` says which)."""
    pending = _pending(archive)
    if exit_status in CLEAN_EXITS and pending.is_file() and pending.stat().st_size > 0:
        os.replace(pending, archive)
        _why(archive).unlink(missing_ok=True)
        return True
    pending.unlink(missing_ok=True)
    return False


def not_committed(exit_status: int) -> str:
    """Why `commit` kept nothing after a JVM exited with `exit_status`."""
    if exit_status in CLEAN_EXITS:
        return f"the JVM exited cleanly ({exit_status}) but wrote no archive"
    return f"the JVM exited with {exit_status}, so a partial archive was not kept"


def _why(archive: Path) -> Path:
    return archive.with_name(f"{archive.name}.why")


def record_not_made(archive: Path, reason: str) -> None:
    """Keep why a trainer made no `archive`, for whoever next wonders why JVMs start
    without one (the test suite, a developer); the next archive made clears it."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    _why(archive).write_text(reason + "\n")


def why_not_made(archive: Path) -> str | None:
    """The reason `record_not_made` kept, if `archive` is still missing."""
    if archive.is_file():
        return None
    try:
        return _why(archive).read_text().strip() or None
    except OSError:
        return None
