"""`herald check` and `herald --version` as users run them: a real subprocess, no broker.

`check` must accept what `run` accepts, report every bad key (one per line, each with its YAML
path) rather than the first, and neither bind nor connect.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import yaml

from tests.support.certs import CertificateAuthority
from tests.support.herald_process import REPO

HERALD = [sys.executable, "-m", "herald"]


def herald(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HERALD, *args], capture_output=True, text=True, cwd=REPO,
                          timeout=60)


def write(tmp_path: Path, doc: Any, name: str = "proxy.yaml") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


def base() -> dict[str, Any]:
    return {"upstream": {"bootstrap": "127.0.0.1:1"},
            "listen": {"bootstrap": "127.0.0.1:19092", "broker_port_base": 19100}}


def test_version_comes_from_the_package_metadata() -> None:
    out = herald("--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"herald {version('herald')}\n"


def test_the_default_proxy_yaml_is_ok() -> None:
    out = herald("check", "--config", "proxy.yaml")
    assert (out.returncode, out.stdout, out.stderr) == (0, "proxy.yaml: ok\n", "")


def test_a_valid_config_is_ok_without_binding_or_connecting(tmp_path: Path) -> None:
    """TLS on both sides, credentials from files, chains, routing: all read and checked,
    while the listener's port is taken and the upstream does not exist (run would fail on
    both; check does neither)."""
    ca = CertificateAuthority(tmp_path / "ca")
    server = ca.issue("server", "herald", hosts=("127.0.0.1",))
    (tmp_path / "password").write_text("secret\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        doc = base()
        doc["upstream"].update(
            tls={"ca_file": str(ca.pem)},
            sasl={"mechanism": "PLAIN", "username": {"file": str(tmp_path / "password")},
                  "password": {"file": str(tmp_path / "password")}})
        doc["listen"].update(bootstrap=f"127.0.0.1:{port}",
                             tls={"cert_file": str(server.cert), "key_file": str(server.key)})
        doc["interceptors"] = {"produce": [{"type": "trace_context"}, {"type": "audit"}]}
        doc["clusters"] = {"eu": {"bootstrap": "kafka-eu.invalid:9092"}}
        doc["routing"] = {"rules": [{"match": {"topics": ["orders"]}, "cluster": "eu"}]}
        path = write(tmp_path, doc)
        out = herald("check", "--config", str(path))
    assert (out.returncode, out.stdout, out.stderr) == (0, f"{path}: ok\n", "")


def test_every_bad_key_of_every_section_is_reported_one_per_line(tmp_path: Path) -> None:
    doc = base()
    doc["listen"].update(colour="blue", broker_port_base="high")
    doc["interceptors"] = {"produce": [
        {"type": "trace_context"},
        {"type": "insert_header", "value": "x"},
        {"type": "audit", "on_error": "drop"},
    ]}
    doc["clusters"] = {"eu": {"bootstrap": "kafka-eu:9092"}}
    doc["routing"] = {"rules": [
        {"match": {"topics": ["orders"]}, "cluster": "eu"},
        {"match": {"topics": ["payments"]}, "cluster": "asia"},
    ]}
    doc["pipeline"] = {"topics": ["orders"], "time_source": "sundial"}
    path = write(tmp_path, doc)
    out = herald("check", "--config", str(path))
    assert out.returncode == 1
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert all(line.startswith(f"{path}: ") for line in lines), lines
    paths = [line.removeprefix(f"{path}: ").split(":")[0] for line in lines]
    assert sorted(paths) == sorted([
        "listen.broker_port_base", "listen.colour", "interceptors.produce[1].header",
        "interceptors.produce[2].on_error", "routing.rules[1].cluster", "pipeline.time_source",
    ]), lines
    assert f"{path}: interceptors.produce[1].header: required" in lines
    assert f"{path}: listen.colour: unknown key" in lines


def test_a_missing_certificate_and_secret_file_are_named_by_their_keys(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "ca")
    server = ca.issue("server", "herald", hosts=("127.0.0.1",))
    doc = base()
    doc["listen"]["tls"] = {"cert_file": str(tmp_path / "gone.pem"), "key_file": str(server.key)}
    doc["admin"] = {"bind": "127.0.0.1:9464", "token": {"file": str(tmp_path / "token")}}
    path = write(tmp_path, doc)
    out = herald("check", "--config", str(path))
    assert out.returncode == 1
    assert out.stderr.splitlines() == [
        f"{path}: listen.tls.cert_file: cannot read {tmp_path / 'gone.pem'} "
        "(No such file or directory)",
        f"{path}: admin.token.file: cannot read {tmp_path / 'token'} (No such file or directory)",
    ]


def test_unreadable_or_invalid_yaml_is_one_clear_line(tmp_path: Path) -> None:
    missing = herald("check", "--config", str(tmp_path / "nope.yaml"))
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr == f"{tmp_path / 'nope.yaml'}: cannot read (No such file or directory)\n"
    broken = write(tmp_path, "listen: [unclosed\n")
    out = herald("check", "--config", str(broken))
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr.startswith(f"{broken}: not valid YAML: ")
    scalar = write(tmp_path, "just a string\n", "scalar.yaml")
    out = herald("check", "--config", str(scalar))
    assert (out.returncode, out.stderr) == (1, f"{scalar}: (top level): expected a mapping\n")


def test_run_refuses_a_bad_file_with_every_error_before_serving(tmp_path: Path) -> None:
    doc = base()
    doc["listen"]["colour"] = "blue"
    doc["logging"] = {"level": "loud"}
    path = write(tmp_path, doc)
    out = herald("run", "--config", str(path))
    assert out.returncode == 1
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert f"{path}: listen.colour: unknown key" in lines
    assert any(line.startswith(f"{path}: logging.level: expected one of")
               for line in lines), lines


def test_run_and_dev_refuse_what_check_refuses_in_the_same_words(tmp_path: Path) -> None:
    """One reading of the file: the `pipeline:` section is checked by `run` too, every error
    is a line `FILE: YAML.PATH: message`, and the exit status is 1, before anything starts."""
    doc = base()
    doc["listen"]["colour"] = "blue"
    doc["pipeline"] = {"topics": ["orders"], "time_source": "sundial"}
    path = write(tmp_path, doc)
    checked = herald("check", "--config", str(path))
    assert checked.returncode == 1
    assert sorted(checked.stderr.splitlines()) == [
        f"{path}: listen.colour: unknown key",
        f"{path}: pipeline.time_source: expected one of herald, broker, got 'sundial'",
    ], checked.stderr
    for command in ("run", "dev"):
        out = herald(command, "--config", str(path))
        assert (out.returncode, out.stdout, out.stderr) == (1, "", checked.stderr), command
    only_pipeline = write(tmp_path, {**base(), "pipeline": {"max_wait_ms": 0}}, "p.yaml")
    out = herald("run", "--config", str(only_pipeline))
    assert (out.returncode, out.stderr) == (
        1, f"{only_pipeline}: pipeline.max_wait_ms: must be > 0\n")
    missing = herald("run", "--config", str(tmp_path / "nope.yaml"))
    assert (missing.returncode, missing.stderr) == (
        1, f"{tmp_path / 'nope.yaml'}: cannot read (No such file or directory)\n")
