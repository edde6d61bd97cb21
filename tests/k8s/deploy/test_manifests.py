"""deploy/: the Helm chart, the static manifests and injected ones, validated.

Every object is checked strictly (unknown fields are errors) against the schemas of the
oldest Kubernetes release with native sidecars and of the latest release `kubernetes-validate`
knows, and the whole lot goes through the checkov security lint (deploy/checkov.yaml says which
checks are skipped and why).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from proxy.k8s import sidecar
from proxy.k8s.command import dump_documents
from proxy.k8s.inject import InjectOptions, inject
from proxy.k8s.sidecar import SidecarSpec
from tests.support.k8s_tools import (
    CHART,
    DEPLOY,
    checkov_path,
    documents,
    find,
    helm,
    helm_template,
    workload,
)
from tests.support.links import link_scope

MANIFESTS = DEPLOY / "kubernetes"
STREAM_PORT = "stream-metrics"
VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
# Custom resources: no schema ships with kubernetes-validate; checked by `_check_custom`.
CUSTOM = {("monitoring.coreos.com/v1", "PodMonitor"), ("cert-manager.io/v1", "Certificate"),
          ("cert-manager.io/v1", "Issuer")}
WEBHOOK_SECRET = ("mode=webhook", "webhook.certificate.source=secret",
                  "webhook.certificate.secretName=herald-webhook-tls",
                  "webhook.certificate.caBundle=" + "Q0EK" * 8)
STREAM = ("pipelineStream.enabled=true", "pipelineStream.topics={orders,payments,shipments}",
          "pipelineStream.terminalTopics={shipments}", "pipelineStream.fetchTopic=herald.fetches")
SECURE = ("upstream.tls.enabled=true", "upstream.sasl.enabled=true",
          "admin.tokenSecretName=herald-admin-token")
RENDERS: dict[str, tuple[str, ...]] = {
    "sidecar": (),
    "sidecar-classic": ("sidecar.native=false",),
    "sidecar-secure": SECURE,
    "gateway": ("mode=gateway",),
    "gateway-secure": ("mode=gateway", "listen.tls.enabled=true", *SECURE),
    "gateway-fixed": ("mode=gateway", "gateway.autoscaling.enabled=false",
                      "image.digest=sha256:" + "0" * 64),
    "stream": STREAM,
    "gateway-stream-claim": ("mode=gateway", *STREAM, "pipelineStream.podMonitor.enabled=false",
                             "pipelineStream.persistence.existingClaim=flows-state",
                             "pipelineStream.image.digest=sha256:" + "1" * 64),
    "webhook": ("mode=webhook",),
    "webhook-secret": (*WEBHOOK_SECRET, "webhook.failurePolicy=Fail",
                       "webhook.reinvocationPolicy=Never", "webhook.excludeNamespaces={ops}"),
    "webhook-issuer": ("mode=webhook", "webhook.certificate.issuerRef.name=corp-ca",
                       "webhook.certificate.issuerRef.kind=ClusterIssuer",
                       "sidecar.native=false", *SECURE),
}


def _validate(docs: list[dict[str, Any]], where: str) -> int:
    checked = 0
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CUSTOM:
            _check_custom(doc)
            continue
        for version in VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{where}: {doc['kind']}/{doc['metadata']['name']} against "
                            f"{version}: {exc.message} at {list(exc.path)}")
        checked += 1
    return checked


def _check_custom(doc: dict[str, Any]) -> None:
    spec, name = doc["spec"], doc["metadata"]["name"]
    if doc["kind"] == "Issuer":
        assert spec == {"selfSigned": {}}
        return
    if doc["kind"] == "Certificate":
        assert set(spec) == {"secretName", "duration", "renewBefore", "commonName", "dnsNames",
                             "privateKey", "usages", "issuerRef"}
        assert spec["issuerRef"]["kind"] in ("Issuer", "ClusterIssuer")
        return
    assert spec["selector"]["matchLabels"]
    (endpoint,) = spec["podMetricsEndpoints"]
    port = {"stream": STREAM_PORT, "webhook": "webhook-health"}.get(
        name.rpartition("-")[2], sidecar.ADMIN_PORT_NAME)
    assert endpoint["port"] == port and endpoint["path"] == "/metrics"


OTLP = "http://jaeger-collector.observability:4318"


def _static() -> dict[str, list[dict[str, Any]]]:
    return {p.name: documents(p.read_text()) for p in sorted(MANIFESTS.glob("*.yaml"))
            if p.name != "gateway-values.yaml"}


def _injected() -> list[dict[str, Any]]:
    app = documents((MANIFESTS / "app.yaml").read_text())
    docs, _ = inject(app, InjectOptions(SidecarSpec(upstream="kafka:9092")))
    classic, _ = inject(app, InjectOptions(SidecarSpec(native=False)))
    return docs + [d for d in classic if d["kind"] == "Deployment"]


def test_helm_lint_passes_in_both_modes() -> None:
    for sets in ((), ("mode=gateway",), STREAM):
        args = [x for pair in sets for x in ("--set", pair)]
        done = helm("lint", str(CHART), "--strict", *args)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_every_rendering_of_the_chart_is_valid(name: str) -> None:
    docs = documents(helm_template(*RENDERS[name]))
    assert _validate(docs, name) >= 3
    kinds = {d["kind"] for d in docs}
    if name.startswith("webhook"):
        assert {"Deployment", "Service", "PodDisruptionBudget",
                "MutatingWebhookConfiguration"} <= kinds
        assert ("Certificate" in kinds) == (name != "webhook-secret")
        assert ("Issuer" in kinds) == (name == "webhook")
        assert "ConfigMap" not in kinds
    elif name.startswith("gateway"):
        assert {"Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"} <= kinds
        assert ("HorizontalPodAutoscaler" in kinds) == (name != "gateway-fixed")
    else:
        assert "Deployment" in kinds and "Service" not in kinds


def test_static_and_injected_manifests_are_valid() -> None:
    for name, docs in _static().items():
        _validate(docs, name)
    assert _validate(_injected(), "injected") == 6


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job",
                                  "CronJob", "Pod"])
def test_every_kind_the_injector_handles_stays_valid(kind: str) -> None:
    for native in (True, False):
        if kind in ("Job", "CronJob") and not native:
            continue  # refused: a classic sidecar would keep the Job from completing
        docs, report = inject([workload(kind)], InjectOptions(SidecarSpec(native=native)))
        assert report.injected == [f"{kind}/web"]
        assert _validate(docs, f"{kind} injected") == 2


def test_strict_validation_catches_an_unknown_field() -> None:
    """The check above can fail: a misspelt field is reported."""
    docs = _injected()
    deployment = find(docs[:3], "Deployment")
    deployment["spec"]["template"]["spec"]["initContainers"][0]["startupProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError, match="startupProbes"):
        kubernetes_validate.validate(deployment, VERSIONS[1], strict=True)


def test_values_outside_the_schema_are_refused() -> None:
    for pair, message in (("mode=mesh", "mode"), ("gateway.replicas=0", "replicas"),
                          ("upstream.sasl.mechanism=MD5", "mechanism"),
                          ("proxy.extra=1", "extra")):
        done = helm("template", "r", str(CHART), "--kube-version", "1.34.0", "--set", pair)
        assert done.returncode != 0, pair
        assert "values don't meet the specifications of the schema" in done.stderr
        assert message in done.stderr


def test_a_gateway_handing_out_its_credentials_to_anyone_is_refused() -> None:
    done = helm("template", "r", str(CHART), "--kube-version", "1.34.0",
                "--set", "mode=gateway", "--set", "upstream.sasl.enabled=true")
    assert done.returncode != 0
    assert "enable listen.tls (mTLS) as well" in done.stderr


def test_native_sidecars_need_kubernetes_1_29_and_classic_ones_do_not() -> None:
    def render(*args: str) -> subprocess.CompletedProcess[str]:
        return helm("template", "r", str(CHART), "--kube-version", "1.28.0", *args)

    refused = render()
    assert refused.returncode != 0
    assert "native sidecars (restartable init containers) need Kubernetes 1.29" in refused.stderr
    classic = render("--set", "sidecar.native=false")
    assert classic.returncode == 0, classic.stderr
    assert _validate(documents(classic.stdout), "classic on 1.28") >= 3


def test_the_chart_sidecar_is_the_injector_sidecar() -> None:
    """Two renderings of one design: the chart's container equals the injector's, with
    tracing to an OTLP endpoint and without."""
    for native, otlp in ((True, ""), (False, ""), (True, OTLP)):
        traced = (f"tracing.otlpEndpoint={otlp}",) if otlp else ()
        docs = documents(helm_template(f"sidecar.native={str(native).lower()}", *SECURE[:2],
                                       *traced))
        pod = find(docs, "Deployment")["spec"]["template"]["spec"]
        group = pod["initContainers"] if native else pod["containers"]
        (charted,) = [c for c in group if c["name"] == "herald"]
        spec = SidecarSpec(image="herald:0.1.0", native=native,
                           upstream_tls_secret="x", sasl_secret="y", otlp_endpoint=otlp)
        assert charted == sidecar.container(spec)
        assert pod["terminationGracePeriodSeconds"] == sidecar.termination_grace_s(spec)
        config = yaml.safe_load(find(docs, "ConfigMap")["data"]["proxy.yaml"])
        injected = sidecar.proxy_config(SidecarSpec(upstream="kafka:9092", upstream_tls_secret="x",
                                                    sasl_secret="y"))
        assert config["upstream"]["sasl"] == injected["upstream"]["sasl"]
        assert {k: v for k, v in config.items() if k != "upstream"} == {
            k: v for k, v in injected.items() if k != "upstream"}
        assert link_scope(config["interceptors"]) == "host"  # the pod's clients, on loopback


def test_the_webhook_gives_injected_sidecars_the_charts_otlp_endpoint() -> None:
    docs = documents(helm_template("mode=webhook", f"tracing.otlpEndpoint={OTLP}"))
    (container,) = find(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert f"--otlp-endpoint={OTLP}" in container["args"]
    plain = documents(helm_template("mode=webhook"))
    (container,) = find(plain, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert not any(a.startswith("--otlp-endpoint") for a in container["args"])


def test_gateway_exposes_bootstrap_and_one_port_per_broker() -> None:
    docs = documents(helm_template("mode=gateway", "gateway.brokerIds={0,1,2}",
                                   namespace="kafka", release="edge"))
    service = find(docs, "Service")
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [
        ("bootstrap", 19092), ("broker-0", 19100), ("broker-1", 19101), ("broker-2", 19102)]
    config = yaml.safe_load(find(docs, "ConfigMap")["data"]["proxy.yaml"])
    assert config["listen"] == {"bootstrap": "0.0.0.0:19092", "broker_port_base": 19100,
                                "advertised_host": "edge-herald.kafka.svc"}
    assert link_scope(config["interceptors"]) == "host"  # each client pod by its address
    deployment = find(docs, "Deployment")
    assert "replicas" not in deployment["spec"]  # the HPA owns it
    pod = deployment["spec"]["template"]["spec"]
    assert {c["topologyKey"] for c in pod["topologySpreadConstraints"]} == {
        "topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    assert find(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 2
    hpa = find(docs, "HorizontalPodAutoscaler")["spec"]
    assert hpa["metrics"][0]["resource"]["name"] == "cpu"
    assert hpa["minReplicas"] >= 2


def test_gateway_rolls_only_for_keys_a_reload_cannot_apply() -> None:
    def checksum(*sets: str) -> str:
        docs = documents(helm_template("mode=gateway", *sets))
        annotations = find(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
        return annotations["checksum/restart-keys"]

    base = checksum()
    assert checksum("proxy.interceptors.fetch[0].type=drop_headers",
                    "proxy.interceptors.fetch[0].headers={x}") == base
    assert checksum("upstream.bootstrap=other:9092") != base


ROUTING_VALUES = {"proxy": {
    "clusters": {"eu": {"bootstrap": "kafka-eu.kafka.svc:9092"}},
    "routing": {"rules": [{"name": "eu-orders", "cluster": "eu", "match": {
        "topics": ["orders"], "headers": {"header": "region", "equals": "eu"}}}]}}}


@pytest.mark.parametrize("mode", ["gateway", "sidecar"])
def test_routing_values_reach_proxy_yaml_and_the_journal_a_writable_volume(
    mode: str, tmp_path: Path,
) -> None:
    from proxy.config.proxy_yaml import parse_config
    from proxy.routing.config import journal_path

    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"mode": mode, **ROUTING_VALUES}))
    docs = documents(helm_template(values=values))
    environ = {"POD_NAME": "p", "POD_NAMESPACE": "shop", "NODE_NAME": "n"}
    config = parse_config(yaml.safe_load(find(docs, "ConfigMap")["data"]["proxy.yaml"]),
                          environ=environ)
    assert [r.name for r in config.routing.rules] == ["eu-orders"]
    assert set(config.clusters) == {"eu"}
    workload = next(d for d in docs if d["kind"] == "Deployment")
    pod = workload["spec"]["template"]["spec"]
    herald = next(c for c in pod.get("initContainers", []) + pod["containers"]
                  if c["name"] == "herald")
    env = {e["name"]: e["value"] for e in herald["env"] if "value" in e}
    path = journal_path(config.routing.journal, Path(sidecar.CONFIG_PATH),
                        config.listen.bootstrap.port, env)
    assert path is not None
    (mount,) = [m for m in herald["volumeMounts"] if path.is_relative_to(m["mountPath"])]
    assert not mount.get("readOnly")
    assert {"name": mount["name"], "emptyDir": {}} in pod["volumes"]


def test_gateway_rolls_for_clusters_not_for_routing_rules(tmp_path: Path) -> None:
    def checksum(values: dict[str, Any]) -> str:
        path = tmp_path / "values.yaml"
        path.write_text(yaml.safe_dump({"mode": "gateway", **values}))
        annotations = find(documents(helm_template(values=path)), "Deployment")["spec"][
            "template"]["metadata"]["annotations"]
        return annotations["checksum/restart-keys"]

    base = checksum(ROUTING_VALUES)
    other_rules = json.loads(json.dumps(ROUTING_VALUES))
    other_rules["proxy"]["routing"]["rules"][0]["match"]["topics"] = ["payments"]
    assert checksum(other_rules) == base  # reloaded by the running pods
    other_cluster = json.loads(json.dumps(ROUTING_VALUES))
    other_cluster["proxy"]["clusters"]["eu"]["bootstrap"] = "kafka-eu2.kafka.svc:9092"
    assert checksum(other_cluster) != base
    journal_off = json.loads(json.dumps(ROUTING_VALUES))
    journal_off["proxy"]["routing"]["journal"] = "off"
    assert checksum(journal_off) != base  # read at start only


def test_generated_manifests_are_what_generate_sh_writes() -> None:
    """app-*-sidecar.yaml and gateway.yaml are made by deploy/kubernetes/generate.sh."""
    app = documents((MANIFESTS / "app.yaml").read_text())
    spec = dict(upstream="kafka-bootstrap.kafka.svc:9093",
                upstream_tls_secret="herald-upstream-tls", sasl_secret="herald-sasl")
    for name, native in (("app-native-sidecar.yaml", True), ("app-classic-sidecar.yaml", False)):
        docs, _ = inject(app, InjectOptions(SidecarSpec(native=native, **spec)))
        committed = (MANIFESTS / name).read_text()
        assert documents(committed) == docs, f"{name} is stale: run generate.sh"
        assert committed.split("\n", 1)[1] == dump_documents(docs)
    rendered = helm_template(values=MANIFESTS / "gateway-values.yaml", namespace="kafka",
                             release="herald")
    committed = (MANIFESTS / "gateway.yaml").read_text()
    assert committed.split("\n", 1)[1] == rendered, "gateway.yaml is stale: run generate.sh"
    # Each committed shape records causal links, scoped by the client's address.
    for name in ("app-native-sidecar.yaml", "app-classic-sidecar.yaml", "gateway.yaml"):
        config_map = find(documents((MANIFESTS / name).read_text()), "ConfigMap")
        assert link_scope(yaml.safe_load(config_map["data"]["proxy.yaml"])["interceptors"]) == (
            "host"), name


def test_security_lint_passes_on_every_object(tmp_path: Path) -> None:
    for name, sets in RENDERS.items():
        (tmp_path / f"chart-{name}.yaml").write_text(helm_template(*sets))
    for name, docs in _static().items():
        (tmp_path / f"static-{name}").write_text(yaml.safe_dump_all(docs))
    (tmp_path / "injected.yaml").write_text(yaml.safe_dump_all(_injected()))
    done = subprocess.run(
        [str(checkov_path()), "--config-file", str(DEPLOY / "checkov.yaml"), "-d", str(tmp_path),
         "--output", "json"],
        capture_output=True, text=True, timeout=600,
    )
    report = json.loads(done.stdout)
    report = report if isinstance(report, dict) else report[0]
    failed = [(f["check_id"], f["resource"], f["file_path"])
              for f in report["results"]["failed_checks"]]
    assert failed == []
    assert done.returncode == 0, done.stderr[-2000:]
    # Every file was read: pods with Herald in them were among the resources checked.
    resources = {p["resource"] for p in report["results"]["passed_checks"]}
    assert {"Deployment.shop.r-app", "Deployment.shop.r-herald", "Deployment.shop.checkout",
            "Deployment.shop.r-herald-stream", "Deployment.shop.r-herald-webhook"} <= resources
    assert report["summary"]["passed"] > 300


def test_the_chart_runs_the_stream_with_its_checkpoint_on_a_volume(tmp_path: Path) -> None:
    from pipeline.config import load_pipeline_config

    docs = documents(helm_template(*STREAM))
    named = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    deployment = named[("Deployment", "r-herald-stream")]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["args"][:2] == ["pipeline", "stream"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["state"]["persistentVolumeClaim"]["claimName"] == "r-herald-stream"
    assert named[("PersistentVolumeClaim", "r-herald-stream")]["spec"]["resources"][
        "requests"]["storage"] == "10Gi"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    # The rendered pipeline.yaml is one Herald's own loader accepts, with its state and
    # output on the volume and its metrics on the port the PodMonitor scrapes.
    config_file = tmp_path / "pipeline.yaml"
    config_file.write_text(named[("ConfigMap", "r-herald-stream")]["data"]["pipeline.yaml"])
    config = load_pipeline_config(config_file, streaming=True)
    assert config.topics == ["orders", "payments", "shipments"]
    assert config.fetch_topic == "herald.fetches" and config.bootstrap == "kafka:9092"
    assert config.stream.trigger == "processing_time"
    for path in (config.stream.checkpoint, config.output):
        assert path.startswith(mounts["state"] + "/")
    (port,) = container["ports"]
    assert config.stream.metrics_bind == f"0.0.0.0:{port['containerPort']}"
    policy = named[("NetworkPolicy", "r-herald-stream")]["spec"]
    assert policy["ingress"] == [{"ports": [{"port": port["containerPort"], "protocol": "TCP"}]}]
    assert policy["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    monitor = named[("PodMonitor", "r-herald-stream")]
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == port["name"] == STREAM_PORT
    labels = pod["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # The proxy's PodMonitor does not select the stream's pod, nor the stream's Herald's.
    proxy_monitor = named[("PodMonitor", "r-herald")]["spec"]["selector"]["matchLabels"]
    assert not proxy_monitor.items() <= labels.items()
    # A claim of one's own instead of a new one; without topics, nothing renders.
    claimed = documents(helm_template(*STREAM, "pipelineStream.persistence.existingClaim=x"))
    assert not [d for d in claimed if d["kind"] == "PersistentVolumeClaim"]
    pod = find([d for d in claimed if d["metadata"]["name"] == "r-herald-stream"],
               "Deployment")["spec"]["template"]["spec"]
    assert {v["name"]: v for v in pod["volumes"]}["state"]["persistentVolumeClaim"] == {
        "claimName": "x"}
    refused = helm("template", "r", str(CHART), "--kube-version", "1.34.0",
                   "--set", "pipelineStream.enabled=true")
    assert refused.returncode != 0 and "pipelineStream.topics: required" in refused.stderr
    assert not [d for d in documents(helm_template()) if "stream" in d["metadata"]["name"]]
