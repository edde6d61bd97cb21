"""The `herald` command as users run it: help, config errors, and `herald dev` end to end."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml
from confluent_kafka import Producer

from tests.support.clients import consume_all
from tests.support.herald_process import REPO, herald_config

HERALD = [sys.executable, "-m", "herald"]


def test_help_documents_both_modes() -> None:
    out = subprocess.run([*HERALD, "--help"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0
    assert re.search(r"^\s+run\s", out.stdout, re.M) and re.search(r"^\s+dev\s", out.stdout, re.M)
    assert "herald ready: bootstrap=HOST:PORT upstream=HOST:PORT" in out.stdout
    run = subprocess.run([*HERALD, "run", "--help"], capture_output=True, text=True, cwd=REPO)
    assert "--config" in run.stdout


def test_invalid_config_is_refused_with_the_yaml_path(tmp_path: Path) -> None:
    config = herald_config("127.0.0.1:9092")
    config["interceptors"] = {"produce": [{"type": "insert_header", "value": "x"}]}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    out = subprocess.run([*HERALD, "run", "--config", str(path)], capture_output=True,
                         text=True, cwd=REPO, timeout=60)
    assert out.returncode == 1
    assert f"{path}: interceptors.produce[0].header: required" in out.stderr.splitlines()


def _children(pid: int) -> list[tuple[int, str]]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            found.append((int(entry), cmdline))
    return found


def test_dev_runs_a_broker_with_herald_in_front_and_stops_both(tmp_path: Path) -> None:
    config = herald_config("127.0.0.1:9092")  # replaced by the local broker
    config["admin"] = {"bind": f"127.0.0.1:{config['listen']['broker_port_base'] + 15}"}
    config["interceptors"] = {"produce": [{"type": "insert_header", "header": "via",
                                           "value": "dev"}]}
    path = tmp_path / "proxy.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.Popen([*HERALD, "dev", "--config", str(path)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 180
        while not lines and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert lines, "herald dev printed nothing"
        ready = re.fullmatch(r"herald ready: bootstrap=(\S+) upstream=127\.0\.0\.1:(\d+)\n",
                             lines[0])
        assert ready, lines
        assert ready.group(1) == f"127.0.0.1:{config['listen']['bootstrap'].split(':')[1]}"
        brokers = [pid for pid, cmd in _children(proc.pid) if "kafka.Kafka" in cmd]
        assert len(brokers) == 1

        producer = Producer({"bootstrap.servers": ready.group(1)})
        producer.produce("dev-topic", b"hello")
        assert producer.flush(60) == 0
        got = consume_all(ready.group(1), "dev-topic", 1)
        assert [(m.value(), m.headers()) for m in got] == [(b"hello", [("via", b"dev")])]
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0
    assert len(lines) == 1  # exactly one line on stdout
    assert not Path(f"/proc/{brokers[0]}").exists(), "the broker outlived herald dev"


def test_dev_starts_a_local_cluster_for_each_named_one_and_routes_there(
    tmp_path: Path,
) -> None:
    config = herald_config("127.0.0.1:9092")
    config["clusters"] = {"eu": {"bootstrap": "kafka-eu.example:9092"}}  # replaced too
    config["routing"] = {"rules": [{"match": {"headers": {"header": "region", "equals": "eu"}},
                                    "cluster": "eu"}]}
    path = tmp_path / "proxy.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.Popen([*HERALD, "dev", "--config", str(path)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    errors: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    threading.Thread(target=lambda: errors.extend(proc.stderr), daemon=True).start()
    try:
        deadline = time.monotonic() + 240
        while not lines and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert lines, "herald dev printed nothing:\n" + "".join(errors)
        bootstrap = re.match(r"herald ready: bootstrap=(\S+)", lines[0]).group(1)
        eu = next(re.search(r"cluster eu is at (\S+)", e).group(1) for e in errors
                  if "cluster eu is at" in e)
        assert len([p for p, cmd in _children(proc.pid) if "kafka.Kafka" in cmd]) == 2
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce("dev-orders", b"to-eu", headers=[("region", b"eu")])
        producer.produce("dev-orders", b"home", headers=[("region", b"us")])
        assert producer.flush(60) == 0
        assert [m.value() for m in consume_all(eu, "dev-orders", 1)] == [b"to-eu"]
        assert [m.value() for m in consume_all(bootstrap, "dev-orders", 1)] == [b"home"]
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0
