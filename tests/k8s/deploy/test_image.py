"""The container image deploy/build-image.sh builds, run as Kubernetes would run the sidecar:
read-only root file system, no capabilities, no privilege escalation, the image's own
unprivileged user, the config mounted read-only where the manifests mount it.

Building the image takes minutes and root, so CI does not build it; this test runs where the
image has been built (`bash deploy/build-image.sh`).
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer

from proxy.devtools.embedded_kafka import KafkaCluster
from proxy.k8s import sidecar
from tests.support.clients import consume_all
from tests.support.herald_process import free_port_block
from tests.support.pod_sim import http_get, readable_folder

IMAGE = "localhost/herald:0.1.0"
# The sandbox this runs in may forbid raising resource limits; lowering them is always allowed.
# runc, because crun refuses hosts with cgroups v1 and v2 mounted side by side.
PODMAN = ["podman", "--runtime", "runc"]
LIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]


def _image_present() -> str | None:
    if shutil.which("podman") is None or shutil.which("runc") is None:
        return "podman and runc are not installed (deploy/build-image.sh installs them)"
    done = subprocess.run(["podman", "image", "exists", IMAGE], capture_output=True)
    if done.returncode != 0:
        return f"{IMAGE} is not built here: run `bash deploy/build-image.sh`"
    return None


@pytest.fixture
def config_dir() -> Iterator[Path]:
    with readable_folder("herald-image-") as folder:
        yield folder


def _get(url: str) -> tuple[int | None, str]:
    return http_get(url, 2)


def test_the_image_serves_as_the_manifests_run_it(
    kafka: KafkaCluster, config_dir: Path, topic_name: str
) -> None:
    missing = _image_present()
    if missing:
        pytest.skip(missing)
    base = free_port_block()
    admin = base + 15
    config = sidecar.proxy_config(sidecar.SidecarSpec(upstream=kafka.bootstrap))
    config["listen"].update(bootstrap=f"127.0.0.1:{base}", broker_port_base=base)
    config["admin"]["bind"] = f"127.0.0.1:{admin}"
    (config_dir / "proxy.yaml").write_text(yaml.safe_dump(config))
    name = f"herald-{uuid.uuid4().hex[:8]}"
    run = [*PODMAN, "run", "--rm", "--name", name, "--network", "host", *LIMITS,
           "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
           "-e", "POD_NAME=web-1", "-e", "POD_NAMESPACE=shop", "-e", "NODE_NAME=node-a",
           "-v", f"{config_dir}:{sidecar.CONFIG_DIR}:ro", IMAGE]
    process = subprocess.Popen(run, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        ready = (None, "")
        while time.monotonic() < deadline and process.poll() is None:
            ready = _get(f"http://127.0.0.1:{admin}/readyz")
            if ready[0] == 200:
                break
            time.sleep(0.3)
        assert ready == (200, "ready"), process.stdout.read().decode() if process.poll() else ready
        assert _get(f"http://127.0.0.1:{admin}/healthz") == (200, "ok")
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{base}"})
        producer.produce(topic_name, b"from the image")
        assert producer.flush(30) == 0
        (record,) = consume_all(f"127.0.0.1:{base}", topic_name, 1)
        assert dict(record.headers())["herald.proxy"] == b"shop/web-1@node-a"
        user = subprocess.run(["podman", "exec", name, "python3", "-c",
                               "import os; print(os.getuid(), os.getgid())"],
                              capture_output=True, text=True, timeout=30)
        assert user.stdout.split() == ["10001", "10001"], user.stderr
        stopped = subprocess.run(["podman", "stop", "--time", "30", name],
                                 capture_output=True, text=True, timeout=60)
        assert stopped.returncode == 0, stopped.stderr
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            subprocess.run(["podman", "kill", name], capture_output=True)
            process.wait(timeout=30)


def test_the_image_has_no_shell() -> None:
    missing = _image_present()
    if missing:
        pytest.skip(missing)
    for shell in ("/bin/sh", "/bin/bash"):
        done = subprocess.run([*PODMAN, "run", "--rm", *LIMITS, "--entrypoint", shell, IMAGE,
                               "-c", "true"], capture_output=True, text=True, timeout=60)
        assert done.returncode != 0
        assert "no such file or directory" in done.stderr.lower(), done.stderr
