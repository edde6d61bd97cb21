"""deploy/build-image.sh takes the Debian archive from apt's own configuration, as apt reads it
(`APT_CONFIG` points apt-config at a file naming other sources), never from an address of its
own: one-line and deb822 sources, options, other vendors' sources before Debian's, a proxy.
And when the build fails, the image tests say why: a skip locally, a failure in CI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.herald_process import REPO
from tests.support.required_parts import APT, needs

SCRIPT = REPO / "deploy" / "build-image.sh"

needs_apt = needs(APT)


def _archive(tmp_path: Path, sources_list: str, parts: dict[str, str],
             settings: str = "") -> subprocess.CompletedProcess[str]:
    (tmp_path / "parts").mkdir()
    (tmp_path / "sources.list").write_text(sources_list)
    for name, text in parts.items():
        (tmp_path / "parts" / name).write_text(text)
    config = tmp_path / "apt.conf"
    config.write_text(f'Dir::Etc::sourcelist "{tmp_path}/sources.list";\n'
                      f'Dir::Etc::sourceparts "{tmp_path}/parts";\n{settings}')
    return subprocess.run(["bash", str(SCRIPT), "--archive"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "APT_CONFIG": str(config)})


@needs_apt
def test_the_first_debian_source_is_the_archive_and_apt_s_proxy_is_used(
    tmp_path: Path
) -> None:
    done = _archive(
        tmp_path,
        "# a comment\n"
        "deb-src http://sources.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] https://packages.cloud.google.com/apt "
        "cloud-sdk-bookworm main\n",
        {"debian.sources":
            "Types: deb deb-src\n"
            "URIs: http://mirror.example/debian/ http://second.example/debian\n"
            "Suites: bookworm bookworm-updates\n"
            "Components: main contrib\n"
            "Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n Suites: not-a-field\n"
            " -----END PGP PUBLIC KEY BLOCK-----\n"
            "\n"
            "Types: deb\n"
            "URIs: http://security.example/debian-security\n"
            "Suites: bookworm-security\n"
            "Components: main\n",
         "a-disabled.sources":
            "Enabled: no\nTypes: deb\nURIs: http://disabled.example/debian\n"
            "Suites: bookworm\nComponents: main\n",
         "z-old.list": "deb http://old.example/debian bullseye main\n"},
        'Acquire::http::Proxy "http://proxy.example:3128/";\n')
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "build-image: Debian archive http://mirror.example/debian, security "
        "http://security.example/debian-security, through http://proxy.example:3128/ "
        "(this machine's apt sources)"]


@needs_apt
def test_an_https_archive_uses_apt_s_https_proxy_and_a_missing_security_source_is_said(
    tmp_path: Path
) -> None:
    done = _archive(tmp_path, "deb https://mirror.example/debian trixie main\n", {},
                    'Acquire::http::Proxy "http://plain.example:3128/";\n'
                    'Acquire::https::Proxy "http://tls.example:3128/";\n')
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "build-image: Debian archive https://mirror.example/debian, through "
        "http://tls.example:3128/ (this machine's apt sources)",
        "build-image: no -security source in apt's sources: the image gets no security archive"]


@needs_apt
def test_apt_sources_without_a_debian_archive_stop_the_build_with_the_reason(
    tmp_path: Path
) -> None:
    done = _archive(tmp_path, "deb http://archive.ubuntu.com/ubuntu noble main\n",
                    {"google.list": "deb https://packages.cloud.google.com/apt cloud-sdk main\n"},
                    'Acquire::http::Proxy "DIRECT";\n')
    assert done.returncode == 1
    assert "build-image: no Debian archive in this machine's apt sources" in done.stderr
    assert f"{tmp_path}/sources.list" in done.stderr
    assert done.stdout == ""


def _image_tests(cache: Path, strict: bool) -> subprocess.CompletedProcess[str]:
    """A real pytest run of the image tests after scripts/test.sh recorded a failed build."""
    env = {**os.environ, "HERALD_CACHE_DIR": str(cache),
           "HERALD_IMAGE": f"herald-absent-{os.getpid()}:0",
           "HERALD_PIPELINE_IMAGE": f"herald-pipeline-absent-{os.getpid()}:0"}
    env.pop("HERALD_TEST_STRICT", None)
    if strict:
        env["HERALD_TEST_STRICT"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
         "tests/k8s/deploy/test_image.py"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_a_failed_build_is_the_image_tests_reason_to_skip_and_a_failure_under_strict(
    tmp_path: Path
) -> None:
    (tmp_path / "image").mkdir()
    (tmp_path / "image" / "build.status").write_text("failed 1\n")
    (tmp_path / "image" / "build.log").write_text(
        "build-image: Debian archive http://mirror.example/debian (this machine's apt sources)\n"
        "build-image: debootstrap bookworm from http://mirror.example/debian failed "
        "(is the mirror reachable from here?)\n")
    reason = ("deploy/build-image.sh failed (exit 1): debootstrap bookworm from "
              "http://mirror.example/debian failed (is the mirror reachable from here?)")

    local = _image_tests(tmp_path, strict=False)
    assert local.returncode == 0, local.stdout
    assert "3 skipped" in local.stdout  # Herald's image (two tests) and the stream's
    assert local.stdout.count(reason) == 3, local.stdout

    ci = _image_tests(tmp_path, strict=True)
    assert ci.returncode == 1, ci.stdout
    assert "3 errors" in ci.stdout
    assert f"HERALD_TEST_STRICT=1: the image must be built and tested: {reason}" in ci.stdout
    assert f"HERALD_TEST_STRICT=1: the stream's image must be built and tested: {reason}" \
        in ci.stdout
