"""The container image deploy/build-image.sh builds, run as Kubernetes would run the sidecar:
read-only root file system (no tmpfs anywhere, as `readOnlyRootFilesystem` gives), no
capabilities, no privilege escalation, the image's own unprivileged user, the config mounted
read-only where the manifests mount it.

scripts/test.sh builds the image before pytest (cached: a run with nothing changed reuses it)
and records the outcome in the cache folder (`image/build.status`, `image/build.log`). Where
the image could not be built (no root, no debootstrap, no apt mirror), these tests skip with
the build's own reason; under `HERALD_TEST_STRICT=1` (CI) that is a failure.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from configuration.cache import cache_root
from proxy.devtools.embedded_kafka import KafkaCluster
from proxy.k8s import sidecar
from tests.support.background_builds import wait_for_build
from tests.support.clients import consume_all
from tests.support.herald_process import free_port_block
from tests.support.pod_sim import http_get, readable_folder
from tests.support.required_parts import absent


def _local(tag: str) -> str:
    return tag if "/" in tag else f"localhost/{tag}"


IMAGE = _local(os.environ.get("HERALD_IMAGE", "herald:0.1.0"))
PIPELINE_IMAGE = _local(os.environ.get("HERALD_PIPELINE_IMAGE", "herald-pipeline:0.1.0"))
# The sandbox this runs in may forbid raising resource limits; lowering them is always allowed.
# runc, because crun refuses hosts with cgroups v1 and v2 mounted side by side.
PODMAN = ["podman", "--runtime", "runc"]
LIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]
AUDIT = ("client_id", "principal", "source", "proxy", "cluster", "time", "msg_id", "origin")


def _build_failure() -> str | None:
    """Why scripts/test.sh's build of the image failed, from its record; None when it did not
    fail (or did not run)."""
    record = cache_root() / "image"
    try:
        status = (record / "build.status").read_text().split()
    except FileNotFoundError:
        return None
    if not status or status[0] != "failed":
        return None
    log = (record / "build.log").read_text(errors="replace").splitlines()
    # The script's own last word names the cause; when something else had the last word
    # (a command that stopped the script), its last lines come too.
    said = [line for line in log if line.startswith("build-image: ")]
    why = said[-1].removeprefix("build-image: ") if said else ""
    if not said or log[-1] != said[-1]:
        why += "\n" + "\n".join(log[-10:])
    return f"deploy/build-image.sh failed (exit {status[1]}): {why} (log: {record / 'build.log'})"


BUILD_WAIT_S = 30 * 60  # scripts/test.sh builds it beside the suite


def _image_missing(image: str = IMAGE) -> str | None:
    wait_for_build(cache_root() / "image" / "build.status", BUILD_WAIT_S)
    tools = shutil.which("podman") and shutil.which("runc")
    if tools and subprocess.run(["podman", "image", "exists", image]).returncode == 0:
        return None
    if failure := _build_failure():
        return failure
    if not tools:
        return "podman and runc are not installed (deploy/build-image.sh installs them)"
    return (f"{image} is not built here: `bash deploy/build-image.sh` builds it (as root), and "
            f"`bash scripts/test.sh` without arguments runs that first")


@pytest.fixture(scope="session")
def image() -> str:
    """The image to run; session-scoped and first in the tests' arguments, so a missing image
    stops them before a broker is started for nothing."""
    missing = _image_missing()
    if missing:
        absent(f"the image must be built and tested: {missing}")
    return IMAGE


@pytest.fixture(scope="session")
def pipeline_image() -> str:
    """The stream's image (the Dockerfile's `pipeline` target), as `image` is Herald's."""
    missing = _image_missing(PIPELINE_IMAGE)
    if missing:
        absent(f"the stream's image must be built and tested: {missing}")
    return PIPELINE_IMAGE


@pytest.fixture
def config_dir() -> Iterator[Path]:
    with readable_folder("herald-image-") as folder:
        yield folder


def _get(url: str) -> tuple[int | None, str]:
    return http_get(url, 2)


def _in_container(name: str, code: str) -> subprocess.CompletedProcess[str]:
    """Python in the running container (it has no shell), as its own user."""
    return subprocess.run(["podman", "exec", name, "python3", "-c", code],
                          capture_output=True, text=True, timeout=30)


def _status_of_herald(name: str) -> dict[str, str]:
    """/proc/1/status of the container: process 1 is Herald itself (the entrypoint)."""
    done = _in_container(name, "import sys; sys.stdout.write(open('/proc/1/status').read())")
    assert done.returncode == 0, done.stderr
    return dict(line.split(":\t", 1) for line in done.stdout.splitlines() if ":\t" in line)


def test_the_image_serves_as_the_manifests_run_it(
    image: str, kafka: KafkaCluster, config_dir: Path, topic_name: str
) -> None:
    base = free_port_block()
    admin = base + 15
    config = sidecar.proxy_config(sidecar.SidecarSpec(upstream=kafka.bootstrap))
    config["listen"].update(bootstrap=f"127.0.0.1:{base}", broker_port_base=base)
    config["admin"]["bind"] = f"127.0.0.1:{admin}"
    (config_dir / "proxy.yaml").write_text(yaml.safe_dump(config))
    name = f"herald-{uuid.uuid4().hex[:8]}"
    run = [*PODMAN, "run", "--rm", "--name", name, "--network", "host", *LIMITS,
           "--read-only", "--read-only-tmpfs=false", "--cap-drop", "ALL",
           "--security-opt", "no-new-privileges",
           "-e", "POD_NAME=web-1", "-e", "POD_NAMESPACE=shop", "-e", "NODE_NAME=node-a",
           "-v", f"{config_dir}:{sidecar.CONFIG_DIR}:ro", image]
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

        # Herald runs as 10001 with no capability in any set and no way to gain one.
        status = _status_of_herald(name)
        assert "herald" in _in_container(name, "print(open('/proc/1/cmdline').read())").stdout
        assert status["Uid"].split() == ["10001"] * 4
        assert status["Gid"].split() == ["10001"] * 4
        for caps in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(status[caps], 16) == 0, f"{caps}: {status[caps]}"
        assert status["NoNewPrivs"].strip() == "1"

        # Nothing in the root file system can be written, /tmp included.
        for path in ("/probe", "/tmp/probe", "/opt/herald/probe"):
            wrote = _in_container(name, f"open({path!r}, 'w')")
            assert wrote.returncode != 0
            assert "Read-only file system" in wrote.stderr, wrote.stderr

        # A record produced through the image comes out with every audit header.
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{base}", "client.id": "shop-web"})
        before_ms = int(time.time() * 1000)
        producer.produce(topic_name, b"from the image")
        assert producer.flush(30) == 0
        (record,) = consume_all(f"127.0.0.1:{base}", topic_name, 1)
        assert record.value() == b"from the image"
        headers = dict(record.headers())
        assert {key for key in headers if key.startswith("herald.")} == {
            f"herald.{field}" for field in AUDIT}, headers
        # The sidecar's chain also starts a W3C trace where the client sent none.
        assert re.fullmatch(rb"00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]", headers["traceparent"])
        broker_admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        cluster_id = broker_admin.describe_cluster(request_timeout=30).result(30).cluster_id
        assert headers["herald.proxy"] == b"shop/web-1@node-a"
        assert headers["herald.client_id"] == b"shop-web"
        assert headers["herald.principal"] == b"User:ANONYMOUS"
        assert headers["herald.source"].startswith(b"127.0.0.1:")
        assert headers["herald.cluster"] == cluster_id.encode()
        assert headers["herald.origin"] == cluster_id.encode()
        assert before_ms <= int(headers["herald.time"]) <= int(time.time() * 1000)
        assert uuid.UUID(headers["herald.msg_id"].decode()).version == 7

        # SIGTERM: Herald drains and exits 0 by itself (podman's SIGKILL after 30 s would make
        # it 137), with no session cut by the grace period and no error on its way out.
        stopped = subprocess.run(["podman", "stop", "--time", "30", name],
                                 capture_output=True, text=True, timeout=60)
        assert stopped.returncode == 0, stopped.stderr
        assert process.wait(timeout=30) == 0
        said = process.stdout.read().decode()
        assert "herald ready:" in said, said
        for trouble in ("Traceback", "shutdown_grace_expired", '"level": "error"'):
            assert trouble not in said, said
    finally:
        if process.poll() is None:
            subprocess.run(["podman", "kill", name], capture_output=True)
            process.wait(timeout=30)


def test_the_image_has_no_shell(image: str) -> None:
    for shell in ("/bin/sh", "/bin/bash"):
        done = subprocess.run([*PODMAN, "run", "--rm", *LIMITS, "--entrypoint", shell, image,
                               "-c", "true"], capture_output=True, text=True, timeout=60)
        assert done.returncode != 0
        assert "no such file or directory" in done.stderr.lower(), done.stderr


def test_the_streams_image_runs_the_stream_offline_as_the_chart_runs_it(
    pipeline_image: str, kafka: KafkaCluster, config_dir: Path, topic_name: str
) -> None:
    """The chart's `pipelineStream` container: read-only root, no capabilities, its own user,
    the config mounted read-only, state on a volume, /tmp on a volume, and the connector's
    jars from the image (Spark resolves nothing with Ivy). It reads the topic, finishes a
    micro-batch, and serves its metrics."""
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(20):
        producer.produce(topic_name, f"record {i}".encode())
    assert producer.flush(30) == 0
    port = free_port_block()
    config = {"pipeline": {
        "bootstrap": kafka.bootstrap, "topics": [topic_name],
        "output": "/var/lib/herald-pipeline/out", "driver_memory": "512m",
        "stream": {"checkpoint": "/var/lib/herald-pipeline/checkpoint",
                   "trigger": "processing_time", "interval_s": 2, "watermark_s": 5,
                   "flow_gap_s": 5, "metrics_bind": f"127.0.0.1:{port}"}}}
    (config_dir / "pipeline.yaml").write_text(yaml.safe_dump(config))
    with readable_folder("herald-stream-state-") as state, \
            readable_folder("herald-stream-tmp-") as tmp:
        for folder in (state, tmp):
            os.chown(folder, 10001, 10001)
        name = f"herald-stream-{uuid.uuid4().hex[:8]}"
        run = [*PODMAN, "run", "--rm", "--name", name, "--network", "host", *LIMITS,
               "--read-only", "--read-only-tmpfs=false", "--cap-drop", "ALL",
               "--security-opt", "no-new-privileges",
               "-v", f"{config_dir}:/etc/herald/pipeline:ro",
               "-v", f"{state}:/var/lib/herald-pipeline", "-v", f"{tmp}:/tmp", pipeline_image]
        started = time.monotonic()
        log = config_dir / "stream.log"  # a file: Spark says more than a pipe holds
        with log.open("wb") as out:
            process = subprocess.Popen(run, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = started + 300
            batches = None
            while time.monotonic() < deadline and process.poll() is None:
                status, text = _get(f"http://127.0.0.1:{port}/metrics")
                count = "herald_stream_batch_duration_seconds_count"
                if status == 200:
                    batches = next((float(line.split()[-1]) for line in text.splitlines()
                                    if line.startswith(count)), None)
                    if batches:
                        break
                time.sleep(1)
            said = log.read_text(errors="replace")[-4000:]
            assert batches, f"no micro-batch in {time.monotonic() - started:.0f} s: {said}"
            print(f"stream image: first micro-batch on /metrics {time.monotonic() - started:.0f}"
                  " s after start")
            status = _status_of_herald(name)
            assert status["Uid"].split() == ["10001"] * 4
            assert int(status["CapEff"], 16) == 0 and status["NoNewPrivs"].strip() == "1"
            assert any(p.name.startswith("offsets") or p.name == "commits"
                       for p in (state / "checkpoint").iterdir())
        finally:
            if process.poll() is None:
                subprocess.run(["podman", "stop", "--time", "30", name], capture_output=True,
                               timeout=60)
                process.wait(timeout=60)
        # Spark named the image's jars: no Ivy resolution (which would ask Maven repositories).
        said = log.read_text(errors="replace")
        assert ":: resolving dependencies" not in said and "ivy-default-cache" not in said, said
