"""An injected pod, run as the kubelet would run it, on this machine.

The pod manifest is what `herald k8s inject` writes for a plain application Pod; the
containers, their args, env, mounts, users, probes and the grace period all come from it. The
pod is a network namespace; the broker is outside, reached over a veth pair. The application
produces and consumes through Herald on localhost, the probes answer from the node's side,
and SIGTERM to the pod loses no acknowledged record and leaves none unacknowledged.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.devtools.embedded_kafka import ExtraListener, KafkaCluster, free_port
from proxy.k8s.inject import InjectOptions, inject
from proxy.k8s.sidecar import SidecarSpec
from tests.support.clients import consume_all
from tests.support.kafka_version import kafka_version
from tests.support.pod_sim import (
    HOST_IP,
    PYTHON,
    Container,
    NamespacesUnavailable,
    Pod,
    PodNetwork,
    readable_folder,
)
from tests.support.required_parts import NAMESPACES, absent, require

APP = Path(__file__).with_name("pod_app.py")
REPO = APP.parents[4]


@pytest.fixture(scope="module")
def network() -> Iterator[PodNetwork]:
    require(NAMESPACES)
    net = PodNetwork()
    try:
        net.create()
    except NamespacesUnavailable as exc:
        net.delete()
        absent(f"no network namespace for the simulated pod: {exc}")
    try:
        yield net
    finally:
        net.delete()


@pytest.fixture(scope="module")
def outside_broker(network: PodNetwork) -> Iterator[tuple[KafkaCluster, str]]:
    """A broker on the node's side of the veth pair, advertising that address to the pod."""
    port = free_port(HOST_IP)
    listener = ExtraListener("NODE", port, port, host=HOST_IP)
    with KafkaCluster(size=1, version=kafka_version(), extra_listeners=[listener]) as cluster:
        yield cluster, f"{HOST_IP}:{port}"


@pytest.fixture
def pod_dir() -> Iterator[Path]:
    with readable_folder("herald-pod-") as folder:
        yield folder


def _pod_manifest(name: str, upstream: str, native: bool) -> list[dict[str, Any]]:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "shop"},
           "spec": {"containers": [{"name": "app", "image": "example/app:1.0",
                                    "env": [{"name": "KAFKA_BOOTSTRAP_SERVERS",
                                             "value": "kafka:9092"}]}]}}
    docs, _ = inject([pod], InjectOptions(SidecarSpec(upstream=upstream, native=native)))
    return docs


def _events(app: Container) -> list[dict[str, Any]]:
    """The app's own JSON lines (librdkafka's log lines share its output)."""
    return [json.loads(line) for line in app.log.read_text().splitlines()
            if line.startswith("{")]


@pytest.mark.parametrize("native", [True, False], ids=["native", "classic"])
def test_pod_runs_probes_answer_and_sigterm_loses_nothing(
    network: PodNetwork, outside_broker: tuple[KafkaCluster, str], pod_dir: Path, native: bool,
) -> None:
    cluster, upstream = outside_broker
    pod = Pod(name=f"checkout-{uuid.uuid4().hex[:5]}", namespace="shop")
    config_map, manifest = _pod_manifest(pod.name, upstream, native)
    spec = manifest["spec"]
    # The ConfigMap volume: its files in a folder, mapped to the container's mountPath; the
    # emptyDir (Herald's state) an empty folder.
    volumes: dict[str, Path] = {}
    for volume in spec["volumes"]:
        folder = pod_dir / volume["name"]
        folder.mkdir()
        volumes[volume["name"]] = folder
        if "emptyDir" in volume:
            continue
        assert volume["configMap"]["name"] == config_map["metadata"]["name"]
        for key, text in config_map["data"].items():
            (folder / key).write_text(text)
    herald_spec = (spec.get("initContainers") or spec["containers"][1:])[0]
    app_spec = spec["containers"][0]
    assert herald_spec["name"] == "herald" and app_spec["name"] == "app"
    # The image's entrypoint is `herald`; here it is this checkout's.
    herald = Container(herald_spec, pod, network, [PYTHON, "-m", "herald"], volumes,
                       pod_dir / "herald.log", {"PYTHONPATH": str(REPO)})
    topic = f"pod-{uuid.uuid4().hex[:8]}"
    app = Container(app_spec, pod, network, [PYTHON, str(APP)], volumes, pod_dir / "app.log",
                    {"TOPIC": topic})
    grace = spec["terminationGracePeriodSeconds"]
    try:
        herald.start()
        if native:
            # A restartable init container: the app starts once its startup probe passed.
            startup = herald.probe_until("startupProbe")
            assert startup[-1] == (200, "ok"), herald.log.read_text()
            app.start()
        else:
            app.start()
            startup = herald.probe_until("startupProbe")
            assert startup[-1] == (200, "ok"), herald.log.read_text()
        assert herald.probe_until("readinessProbe")[-1] == (200, "ready")
        assert herald.probe_once("livenessProbe") == (200, "ok")

        deadline = time.monotonic() + 90
        while "consumed" not in app.log.read_text() and time.monotonic() < deadline:
            assert app.process is not None and app.process.poll() is None, app.log.read_text()
            time.sleep(0.2)
        first = _events(app)[0]
        assert first == {"event": "consumed", "records": True}, app.log.read_text()
        time.sleep(1.0)  # steady producing, batches in flight
        rss = herald.rss_mib()
        assert rss < 512, f"Herald uses {rss:.0f} MiB, above the sidecar's memory limit"

        # SIGTERM to the pod. Native: the app first, the sidecar once the app has exited.
        # Classic: both at once, Herald after its preStop hook.
        stop = time.monotonic() + grace
        app.terminate()
        if native:
            app_status = app.wait(stop)
            herald.terminate()
        else:
            herald.pre_stop()
            herald.terminate()
            app_status = app.wait(stop)
        herald_status = herald.wait(stop)
        report = _events(app)[-1]
        assert app_status == 0, app.log.read_text()
        assert herald_status == 0, herald.log.read_text()
        assert report["in_flight_at_sigterm"] > 0, report  # the stop met unfinished requests
        assert report["acked"] == report["sent"] and report["failed"] == []
    finally:
        app.kill()
        herald.kill()

    # Everything acknowledged is in the topic, once, stamped with the pod's identity.
    records = consume_all(cluster.bootstrap, topic, report["sent"], timeout=90)
    assert sorted(int(m.value()) for m in records) == list(range(report["sent"]))
    stamp = f"shop/{pod.name}@{pod.node}".encode()
    assert all(dict(m.headers())["herald.proxy"] == stamp for m in records)
    print(f"simulated pod ({'native' if native else 'classic'}): {report['sent']} records, "
          f"{report['in_flight_at_sigterm']} in flight at SIGTERM, Herald RSS {rss:.0f} MiB")
