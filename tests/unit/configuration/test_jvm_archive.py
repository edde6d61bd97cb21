"""Class-data archives: one per classpath, never a stale or a truncated one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from configuration import jvm_archive


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HERALD_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _jars(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"jar " + name.encode())
    return folder


def test_the_archive_is_named_by_the_jars_and_changes_with_any_of_them(
        tmp_path: Path, cache: Path) -> None:
    libs = _jars(tmp_path / "libs", "a.jar", "b.jar")
    wildcard = jvm_archive.archive_path("kafka", [f"{libs}/*"])
    listed = jvm_archive.archive_path("kafka", [str(libs / "a.jar"), str(libs / "b.jar")])
    assert wildcard == listed  # a `folder/*` entry is the jars in it
    assert wildcard.parent == cache / jvm_archive.FOLDER
    assert wildcard.name.startswith("kafka-") and wildcard.suffix == ".jsa"
    assert jvm_archive.archive_path("spark", [f"{libs}/*"]) != wildcard

    (libs / "b.jar").write_bytes(b"a longer jar b")
    grown = jvm_archive.archive_path("kafka", [f"{libs}/*"])
    assert grown != wildcard
    st = (libs / "b.jar").stat()
    os.utime(libs / "b.jar", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert jvm_archive.archive_path("kafka", [f"{libs}/*"]) != grown
    _jars(libs, "c.jar")
    assert jvm_archive.archive_path("kafka", [f"{libs}/*"]) not in {wildcard, grown}


def test_no_flags_until_the_archive_exists(tmp_path: Path, cache: Path) -> None:
    archive = jvm_archive.archive_path("kafka", [str(_jars(tmp_path / "l", "a.jar"))])
    assert jvm_archive.use_flags(archive) == []
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"archive")
    flags = jvm_archive.use_flags(archive)
    assert f"-XX:SharedArchiveFile={archive}" in flags
    assert "-Xlog:cds=off" in flags  # a tool's stdout stays its own


def _dumped(archive: Path, content: bytes) -> Path:
    """The file a JVM started with dump_flags(archive) would have written at its exit."""
    (flag,) = (f for f in jvm_archive.dump_flags(archive) if "ArchiveClassesAtExit" in f)
    pending = Path(flag.split("=", 1)[1])
    pending.write_bytes(content)
    return pending


@pytest.mark.parametrize("status", [0, 143, -15])
def test_a_clean_exit_puts_the_archive_in_place(tmp_path: Path, cache: Path,
                                                status: int) -> None:
    archive = jvm_archive.archive_path("kafka", [str(tmp_path)])
    pending = _dumped(archive, b"classes")
    assert jvm_archive.commit(archive, status)
    assert archive.read_bytes() == b"classes" and not pending.exists()


@pytest.mark.parametrize("status", [1, 137, -9, 134, -6])
def test_an_unclean_exit_keeps_no_archive(tmp_path: Path, cache: Path, status: int) -> None:
    archive = jvm_archive.archive_path("kafka", [str(tmp_path)])
    pending = _dumped(archive, b"perhaps half the classes")
    assert not jvm_archive.commit(archive, status)
    assert not archive.exists() and not pending.exists()


def test_an_empty_or_missing_dump_keeps_no_archive(tmp_path: Path, cache: Path) -> None:
    archive = jvm_archive.archive_path("kafka", [str(tmp_path)])
    pending = _dumped(archive, b"")
    assert not jvm_archive.commit(archive, 0)
    assert not archive.exists() and not pending.exists()
    jvm_archive.dump_flags(archive)
    assert not jvm_archive.commit(archive, 0)
    assert not archive.exists()


def test_the_reason_a_refused_commit_gives() -> None:
    assert "exited cleanly (143) but wrote no archive" in jvm_archive.not_committed(143)
    assert jvm_archive.not_committed(-9) == (
        "the JVM exited with -9, so a partial archive was not kept")


def test_a_dump_keeps_the_jvm_s_own_warnings(tmp_path: Path, cache: Path) -> None:
    archive = jvm_archive.archive_path("kafka", [str(tmp_path)])
    assert not any(flag.startswith("-Xlog") for flag in jvm_archive.dump_flags(archive))


def _fake_java(folder: Path, script: str) -> str:
    java = folder / "java"
    java.write_text(f"#!/bin/sh\n{script}\n")
    java.chmod(0o755)
    return str(java)


def test_a_jdk_that_writes_no_archive_is_named_with_its_words(tmp_path: Path) -> None:
    java = _fake_java(tmp_path, "echo 'Error occurred during initialization of VM'; "
                                "echo 'base CDS archive is not loaded'; exit 1")
    refused = jvm_archive.dumping_refused(java)
    assert refused is not None
    assert "(exit 1)" in refused and "base CDS archive is not loaded" in refused
    assert jvm_archive.dumping_refused(str(tmp_path / "no-such-java")) is not None


def test_a_jdk_that_writes_one_is_not_refused(tmp_path: Path) -> None:
    # `java -XX:ArchiveClassesAtExit=PATH -version`, as a JDK that writes archives acts.
    java = _fake_java(tmp_path, 'printf classes > "${1#-XX:ArchiveClassesAtExit=}"')
    assert jvm_archive.dumping_refused(java) is None


def test_why_no_archive_was_made_is_kept_until_one_is(tmp_path: Path, cache: Path) -> None:
    archive = jvm_archive.archive_path("kafka", [str(tmp_path)])
    assert jvm_archive.why_not_made(archive) is None
    jvm_archive.record_not_made(archive, "the JVM exited with -9")
    assert jvm_archive.why_not_made(archive) == "the JVM exited with -9"
    _dumped(archive, b"classes")
    assert jvm_archive.commit(archive, 0)
    assert jvm_archive.why_not_made(archive) is None
    assert list(archive.parent.iterdir()) == [archive]
