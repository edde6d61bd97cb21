"""`herald k8s inject`: the sidecar added to every kind of workload, once, or a clear refusal."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from herald.cli import main
from proxy.config.proxy_yaml import parse_config
from proxy.k8s import sidecar
from proxy.k8s.command import dump_documents
from proxy.k8s.inject import InjectError, InjectOptions, inject
from proxy.k8s.sidecar import SidecarSpec
from proxy.k8s.sizing import Throughput, cpu_millicores, link_capacity
from proxy.routing.config import journal_path
from tests.support.k8s_tools import workload
from tests.support.links import link_scope

POD_ENV = {"POD_NAME": "web-1", "POD_NAMESPACE": "shop", "NODE_NAME": "n1"}


def the_pod(doc: dict[str, Any]) -> dict[str, Any]:
    if doc["kind"] == "Pod":
        return doc
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]
    return doc["spec"]["template"]


def heralds(pod: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod["spec"]
    return [c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == "herald"]


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job",
                                  "CronJob", "Pod"])
def test_every_workload_kind_gets_a_native_sidecar_and_its_config_map(kind: str) -> None:
    docs, report = inject([workload(kind)], InjectOptions(SidecarSpec(upstream="kafka:9093")))
    config_map, injected = docs
    assert report.injected == [f"{kind}/web"]
    assert config_map["kind"] == "ConfigMap"
    assert config_map["metadata"]["name"] == "web-herald"
    assert config_map["metadata"]["namespace"] == "shop"
    pod = the_pod(injected)
    (herald,) = heralds(pod)
    assert pod["spec"]["initContainers"][0] is herald
    assert herald["restartPolicy"] == "Always"
    assert herald["args"] == ["run", "--config", "/etc/herald/config/proxy.yaml"]
    assert {"name": "herald-config", "configMap": {"name": "web-herald"}} in pod["spec"]["volumes"]
    app = pod["spec"]["containers"][0]
    assert app["env"] == [{"name": "KAFKA_BOOTSTRAP_SERVERS", "value": "localhost:19092"}]
    assert pod["metadata"]["annotations"][sidecar.INJECTED] == "native"
    assert pod["metadata"]["labels"][sidecar.SIDECAR_LABEL] == "true"


def test_the_sidecar_is_probed_secured_sized_and_told_who_it_is() -> None:
    docs, _ = inject([workload("Deployment")], InjectOptions())
    (herald,) = heralds(the_pod(docs[1]))
    assert herald["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "herald-admin"}
    assert herald["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "herald-admin"}
    assert herald["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "herald-admin"}
    assert herald["ports"] == [{"name": "herald-admin", "containerPort": 9464, "protocol": "TCP"}]
    sc = herald["securityContext"]
    assert sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in herald["env"]
            if "valueFrom" in e} == {
        "POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace",
        "NODE_NAME": "spec.nodeName"}
    assert herald["resources"] == {"requests": {"cpu": "50m", "memory": "128Mi"},
                                   "limits": {"memory": "512Mi"}}


def test_the_routing_journal_is_on_a_writable_volume_that_outlives_a_restart() -> None:
    """routing.journal: auto puts the journal in $HERALD_STATE_DIR: a folder the read-only
    container can write, in an emptyDir, which a container restart keeps."""
    docs, _ = inject([workload("Deployment")], InjectOptions())
    pod = the_pod(docs[1])
    (herald,) = heralds(pod)
    env = {e["name"]: e["value"] for e in herald["env"] if "value" in e}
    path = journal_path("auto", Path(sidecar.CONFIG_PATH), sidecar.LISTEN_PORT, env)
    assert path is not None
    (mount,) = [m for m in herald["volumeMounts"] if path.is_relative_to(m["mountPath"])]
    assert not mount.get("readOnly")
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
    assert volume == {"name": mount["name"], "emptyDir": {}}


def test_the_generated_proxy_yaml_is_valid_and_matches_the_pod() -> None:
    docs, _ = inject([workload("Deployment")], InjectOptions(SidecarSpec(upstream="k:9093")))
    config = parse_config(yaml.safe_load(docs[0]["data"]["proxy.yaml"]), environ=POD_ENV)
    assert config.instance_id == "shop/web-1@n1"
    assert str(config.upstream.bootstrap[0]) == "k:9093"
    assert str(config.listen.bootstrap) == "127.0.0.1:19092"
    assert config.admin.bind is not None and config.admin.bind.port == 9464
    assert config.reload_watch_s > 0
    assert link_scope(config.interceptors) == "host"  # the pod's clients are on loopback
    pod = the_pod(docs[1])["spec"]
    # Room for Herald's whole drain after SIGTERM.
    assert pod["terminationGracePeriodSeconds"] >= config.shutdown_grace_s + 5


def test_tls_and_sasl_secrets_are_mounted_where_proxy_yaml_looks() -> None:
    spec = SidecarSpec(upstream_tls_secret="kafka-ca", sasl_secret="kafka-user")
    docs, _ = inject([workload("Deployment")], InjectOptions(spec))
    config = yaml.safe_load(docs[0]["data"]["proxy.yaml"])
    pod = the_pod(docs[1])["spec"]
    (herald,) = heralds(the_pod(docs[1]))
    mounts = {m["name"]: m["mountPath"] for m in herald["volumeMounts"]}
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets == {"herald-upstream-tls": "kafka-ca", "herald-sasl": "kafka-user"}
    tls, sasl = config["upstream"]["tls"], config["upstream"]["sasl"]
    assert Path(tls["ca_file"]).parent == Path(mounts["herald-upstream-tls"])
    assert Path(tls["key_file"]).parent == Path(mounts["herald-upstream-tls"])
    assert Path(sasl["password"]["file"]).parent == Path(mounts["herald-sasl"])
    assert sasl["mechanism"] == "SCRAM-SHA-512"


def test_injecting_twice_changes_nothing_the_second_time() -> None:
    source = [workload("Deployment"), workload("Job", "batch"),
              {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}}]
    once, first = inject(source, InjectOptions())
    twice, second = inject(once, InjectOptions())
    assert twice == once
    assert dump_documents(twice) == dump_documents(once)
    assert first.injected == ["Deployment/web", "Job/batch"]
    assert second.injected == [] and second.unchanged == ["Deployment/web", "Job/batch"]


def test_the_input_is_not_modified() -> None:
    source = [workload("Deployment")]
    before = copy.deepcopy(source)
    inject(source, InjectOptions())
    assert source == before


def test_several_containers_get_one_sidecar_and_the_named_ones_the_address() -> None:
    doc = workload("Deployment", containers=[
        {"name": "api", "image": "a", "env": [
            {"name": "KAFKA", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
            {"name": "OTHER", "value": "kept"}]},
        {"name": "worker", "image": "w"},
        {"name": "log-shipper", "image": "l"},
    ])
    options = InjectOptions(bootstrap_env=("KAFKA", "SPRING_KAFKA_BOOTSTRAP_SERVERS"),
                            containers=("api", "worker"))
    docs, _ = inject([doc], options)
    pod = the_pod(docs[1])
    assert len(heralds(pod)) == 1
    api, worker, shipper = pod["spec"]["containers"]
    assert api["env"] == [{"name": "KAFKA", "value": "localhost:19092"},
                          {"name": "OTHER", "value": "kept"},
                          {"name": "SPRING_KAFKA_BOOTSTRAP_SERVERS", "value": "localhost:19092"}]
    assert [e["name"] for e in worker["env"]] == ["KAFKA", "SPRING_KAFKA_BOOTSTRAP_SERVERS"]
    assert "env" not in shipper
    assert pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] == "api"


def test_without_container_names_only_containers_that_have_the_variable_are_changed() -> None:
    doc = workload("Deployment", containers=[
        {"name": "api", "image": "a", "env": [
            {"name": "KAFKA_BOOTSTRAP_SERVERS", "value": "kafka:9092"},
            {"name": "OTHER", "value": "kept"}]},
        {"name": "metrics-exporter", "image": "m", "env": [{"name": "PORT", "value": "9100"}]},
        {"name": "log-shipper", "image": "l"},
    ])
    docs, report = inject([doc], InjectOptions())
    api, exporter, shipper = the_pod(docs[1])["spec"]["containers"]
    assert api["env"] == [{"name": "KAFKA_BOOTSTRAP_SERVERS", "value": "localhost:19092"},
                          {"name": "OTHER", "value": "kept"}]
    assert exporter["env"] == [{"name": "PORT", "value": "9100"}]
    assert "env" not in shipper
    assert report.injected == ["Deployment/web"] and report.unpointed == []


def test_named_containers_get_the_variable_and_no_other_is_changed() -> None:
    doc = workload("Deployment", containers=[
        {"name": "api", "image": "a"},
        {"name": "side", "image": "s", "env": [
            {"name": "KAFKA_BOOTSTRAP_SERVERS", "value": "logs-kafka:9092"}]},
    ])
    docs, _ = inject([doc], InjectOptions(containers=("api",)))
    api, side = the_pod(docs[1])["spec"]["containers"]
    assert api["env"] == [{"name": "KAFKA_BOOTSTRAP_SERVERS", "value": "localhost:19092"}]
    assert side["env"] == [{"name": "KAFKA_BOOTSTRAP_SERVERS", "value": "logs-kafka:9092"}]


def test_a_pod_where_no_container_has_the_variable_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _write(tmp_path / "app.yaml", workload("Deployment", containers=[
        {"name": "api", "image": "a"}, {"name": "exporter", "image": "e"}]))
    assert main(["k8s", "inject", str(source), "--bootstrap-env", "BROKERS"]) == 0
    out, err = capsys.readouterr()
    pod = the_pod(list(yaml.safe_load_all(out))[1])
    assert all("env" not in c for c in pod["spec"]["containers"])
    assert ("Deployment/web: no container has BROKERS, so none was pointed at Herald "
            "(name the application's with --container)") in err


def test_existing_init_containers_run_after_herald() -> None:
    doc = workload("Deployment", containers=[{"name": "app", "image": "a"}],
                   initContainers=[{"name": "migrate", "image": "m"}])
    docs, _ = inject([doc], InjectOptions())
    names = [c["name"] for c in the_pod(docs[1])["spec"]["initContainers"]]
    assert names == ["herald", "migrate"]


def test_classic_sidecar_is_a_container_that_waits_before_stopping() -> None:
    docs, _ = inject([workload("Deployment")], InjectOptions(SidecarSpec(native=False)))
    pod = the_pod(docs[1])
    assert "initContainers" not in pod["spec"]
    herald = pod["spec"]["containers"][-1]
    assert herald["name"] == "herald" and "restartPolicy" not in herald
    assert herald["lifecycle"]["preStop"]["exec"]["command"][0] == "python3"
    assert pod["metadata"]["annotations"][sidecar.INJECTED] == "classic"
    assert pod["spec"]["terminationGracePeriodSeconds"] == sidecar.termination_grace_s(
        SidecarSpec(native=False))


def test_a_list_of_workloads_is_injected_item_by_item() -> None:
    doc = {"apiVersion": "v1", "kind": "List", "items": [workload("Deployment"),
                                                          workload("StatefulSet", "db")]}
    (out,), report = inject([doc], InjectOptions())
    assert [i["kind"] for i in out["items"]] == ["ConfigMap", "Deployment", "ConfigMap",
                                                 "StatefulSet"]
    assert report.injected == ["Deployment/web", "StatefulSet/db"]


def test_an_existing_config_map_is_referenced_not_written() -> None:
    docs, _ = inject([workload("Deployment")], InjectOptions(config_map="shared-herald"))
    (doc,) = docs
    assert {"name": "herald-config", "configMap": {"name": "shared-herald"}} in (
        the_pod(doc)["spec"]["volumes"])


def test_a_longer_termination_grace_period_is_kept() -> None:
    docs, _ = inject([workload("Deployment", containers=[{"name": "a", "image": "a"}],
                               terminationGracePeriodSeconds=120)], InjectOptions())
    assert the_pod(docs[1])["spec"]["terminationGracePeriodSeconds"] == 120


def _bad(**pod: Any) -> dict[str, Any]:
    return workload("Deployment", **pod)


@pytest.mark.parametrize("doc, options, message", [
    ("just text", InjectOptions(), "document 1: expected a Kubernetes object (a mapping), got str"),
    ({"metadata": {"name": "x"}}, InjectOptions(), "document 1: apiVersion: required"),
    ({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w"}, "spec": {}},
     InjectOptions(), "document 1 (Deployment/w): spec.template: expected a mapping"),
    (_bad(containers=[]), InjectOptions(),
     "document 1 (Deployment/web): spec.template.spec.containers: expected a non-empty list"),
    (_bad(containers=[{"image": "x"}]), InjectOptions(),
     "spec.template.spec.containers[0]: expected a container with a name"),
    (_bad(containers=[{"name": "herald", "image": "x"}]), InjectOptions(),
     "spec.template.spec.containers[0].name: a container named 'herald' already exists"),
    (_bad(containers=[{"name": "a", "image": "x", "ports": [{"containerPort": 9464}]}]),
     InjectOptions(), "containers[0].ports[0].containerPort: port 9464 is Herald's (its admin"),
    (_bad(containers=[{"name": "a", "image": "x", "ports": [{"containerPort": 19101}]}]),
     InjectOptions(), "port 19101 is Herald's (its broker ports)"),
    (_bad(containers=[{"name": "a", "image": "x"}], hostNetwork=True), InjectOptions(),
     "spec.template.spec.hostNetwork: Herald's ports would be opened on the node"),
    (_bad(containers=[{"name": "a", "image": "x"}], volumes=[{"name": "herald-config"}]),
     InjectOptions(), "spec.template.spec.volumes: volume 'herald-config' already exists"),
    (_bad(), InjectOptions(containers=("nope",)),
     "spec.template.spec.containers: no container named 'nope'"),
    (workload("Job"), InjectOptions(SidecarSpec(native=False)),
     "document 1 (Job/batch): spec.template.spec.restartPolicy: a classic sidecar never exits"
     .replace("Job/batch", "Job/web")),
])
def test_manifests_that_cannot_work_are_refused_with_the_path(
    doc: Any, options: InjectOptions, message: str
) -> None:
    with pytest.raises(InjectError) as err:
        inject([doc], options)
    assert message in str(err.value)


def test_sizing_follows_the_measured_cpu_per_mb() -> None:
    assert cpu_millicores(Throughput(0, 0)) == 50  # the floor measured at low rates
    # 100 MB/s produce, 50 consume, plain: (100 * 2.3 + 50 * 0.4) * 1.5 = 375
    assert cpu_millicores(Throughput(100, 50, "none")) == 375
    # with trace_context + audit: (100 * 3.8 + 50 * 0.6) * 1.5 = 615
    assert cpu_millicores(Throughput(100, 50, "trace_audit")) == 615
    # with links too (the sidecar's chain, the default): (100 * 4.4 + 50 * 1.5) * 1.5 = 773
    assert cpu_millicores(Throughput(100, 50, "trace_audit_link")) == 773
    assert cpu_millicores(Throughput(100, 50)) == 773
    with pytest.raises(ValueError, match="interceptors"):
        Throughput(1, 1, "all")
    with pytest.raises(ValueError, match="produce_mb_s"):
        Throughput(-1, 1)



def _link_of(spec: SidecarSpec) -> dict[str, Any]:
    config = parse_config(sidecar.proxy_config(spec), environ=POD_ENV)  # checked as loaded
    (trace,) = [m for m in config.interceptors["produce"] if m["type"] == "trace_context"]
    return trace["link"]


def test_the_links_memory_is_sized_from_the_pod_s_consume_rate() -> None:
    """A minute of the declared consume rate in 1 KiB records, each its own trace, within
    [10,000, the shipped 100,000]; the shipped capacity is not written out."""
    assert link_capacity(Throughput(consume_mb_s=0.5)) == 29_297  # 488.3 records/s * 60 s
    assert link_capacity(Throughput(consume_mb_s=1)) == 58_594
    assert link_capacity(Throughput(consume_mb_s=0)) == 10_000
    assert link_capacity(Throughput(consume_mb_s=5)) == 100_000  # the default: capped
    assert _link_of(SidecarSpec(load=Throughput(consume_mb_s=0.5))) == {
        "scope": "host", "capacity": 29_297}
    assert _link_of(SidecarSpec()) == {"scope": "host"}  # the shipped capacity applies


# ---- the command line ------------------------------------------------------------------------

def _write(path: Path, *docs: Any) -> Path:
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_cli_injects_files_and_reports_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _write(tmp_path / "app.yaml", workload("Deployment"))
    assert main(["k8s", "inject", str(source), "--upstream", "kafka:9092",
                 "--produce-mb-s", "100", "--consume-mb-s", "50", "--interceptors", "none"]) == 0
    out, err = capsys.readouterr()
    docs = list(yaml.safe_load_all(out))
    (herald,) = heralds(the_pod(docs[1]))
    assert herald["resources"]["requests"]["cpu"] == "375m"
    assert "Deployment/web: sidecar added" in err
    again = tmp_path / "injected.yaml"
    again.write_text(out)
    assert main(["k8s", "inject", str(again), "-o", str(tmp_path / "twice.yaml")]) == 0
    assert (tmp_path / "twice.yaml").read_text() == out
    assert "already injected, unchanged" in capsys.readouterr().err


def test_cli_reads_stdin(monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(workload("Pod"))))
    assert main(["k8s", "inject", "--classic"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["ConfigMap", "Pod"]
    assert docs[1]["spec"]["containers"][-1]["name"] == "herald"


def test_cli_refuses_with_a_clear_error_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _write(tmp_path / "app.yaml", workload("Deployment"), {"kind": "Thing"})
    output = tmp_path / "out.yaml"
    assert main(["k8s", "inject", str(source), "-o", str(output)]) == 2
    assert not output.exists()
    assert capsys.readouterr().err == (
        "herald k8s inject: document 2 (Thing/?): apiVersion: required: not a Kubernetes "
        "object\n")
    (tmp_path / "broken.yaml").write_text("kind: [unclosed\n")
    assert main(["k8s", "inject", str(tmp_path / "broken.yaml")]) == 2
    assert "broken.yaml: not valid YAML" in capsys.readouterr().err
    assert main(["k8s", "inject", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml: cannot read (No such file or directory)" in capsys.readouterr().err


def test_cli_takes_ports_and_drain_time_from_a_given_proxy_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {"upstream": {"bootstrap": "k:9092"},
              "listen": {"bootstrap": "127.0.0.1:29092", "broker_port_base": 29100},
              "admin": {"bind": "0.0.0.0:8080"}, "shutdown": {"grace_s": 50},
              "instance": {"id": "${POD_NAME}"}}
    own = tmp_path / "proxy.yaml"
    own.write_text(yaml.safe_dump(config))
    source = _write(tmp_path / "app.yaml", workload("Deployment"))
    assert main(["k8s", "inject", str(source), "--config", str(own)]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert docs[0]["data"]["proxy.yaml"] == own.read_text()
    pod = the_pod(docs[1])["spec"]
    assert pod["containers"][0]["env"][0]["value"] == "localhost:29092"
    assert pod["initContainers"][0]["ports"][0]["containerPort"] == 8080
    assert pod["terminationGracePeriodSeconds"] == 60


def test_cli_accepts_a_proxy_yaml_naming_files_only_the_pod_has(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TLS and SASL files come from Secrets mounted in the pod; they are not looked for here."""
    config = {"upstream": {"bootstrap": "k:9093",
                           "tls": {"ca_file": "/etc/herald/upstream-tls/ca.crt"},
                           "sasl": {"mechanism": "PLAIN",
                                    "username": {"file": "/etc/herald/sasl/username"},
                                    "password": {"file": "/etc/herald/sasl/password"}}},
              "listen": {"bootstrap": "127.0.0.1:19092"},
              "admin": {"bind": "0.0.0.0:9464", "token": {"file": "/etc/herald/admin/token"}}}
    own = tmp_path / "proxy.yaml"
    own.write_text(yaml.safe_dump(config))
    source = _write(tmp_path / "app.yaml", workload("Deployment"))
    assert main(["k8s", "inject", str(source), "--config", str(own), "--upstream-tls-secret",
                 "ca", "--sasl-secret", "user"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert yaml.safe_load(docs[0]["data"]["proxy.yaml"]) == config
    mounts = {m["mountPath"] for m in heralds(the_pod(docs[1]))[0]["volumeMounts"]}
    assert {"/etc/herald/upstream-tls", "/etc/herald/sasl"} <= mounts


@pytest.mark.parametrize("change, message", [
    ({"admin": {"bind": "127.0.0.1:9464"}}, "admin.bind: 127.0.0.1:9464 is loopback"),
    ({"admin": None}, "admin.bind: required"),
    ({"instance": {"id": "${HOSTNAME}"}},
     "instance.id: environment variable HOSTNAME is not set"),
])
def test_cli_refuses_a_proxy_yaml_the_sidecar_could_not_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict, message: str
) -> None:
    config = {"upstream": {"bootstrap": "k:9092"}, "listen": {"bootstrap": "127.0.0.1:19092"},
              "admin": {"bind": "0.0.0.0:9464"}, **change}
    own = tmp_path / "proxy.yaml"
    own.write_text(yaml.safe_dump(config))
    source = _write(tmp_path / "app.yaml", workload("Deployment"))
    assert main(["k8s", "inject", str(source), "--config", str(own)]) == 2
    assert f"proxy.yaml: {message}" in capsys.readouterr().err


def test_cli_names_every_error_of_a_given_proxy_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {"upstream": {"bootstrap": "k:9092"},
              "listen": {"bootstrap": "127.0.0.1:19092", "colour": "blue"},
              "admin": {"bind": "0.0.0.0:9464"}, "logging": {"level": "loud"}}
    own = tmp_path / "proxy.yaml"
    own.write_text(yaml.safe_dump(config))
    source = _write(tmp_path / "app.yaml", workload("Deployment"))
    assert main(["k8s", "inject", str(source), "--config", str(own)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"herald k8s inject: {own}: listen.colour: unknown key"
    assert lines[1].startswith(f"herald k8s inject: {own}: logging.level: expected one of")
    assert len(lines) == 2


def _kubelet_env(container: dict[str, Any], downward: dict[str, str]) -> dict[str, str]:
    """The container's environment as the kubelet gives it: downward-API values, and
    `$(VAR)` in a value expanded from the variables before it."""
    env: dict[str, str] = {}
    for item in container["env"]:
        value = downward[item["name"]] if "valueFrom" in item else item["value"]
        for name, known in env.items():
            value = value.replace(f"$({name})", known)
        env[item["name"]] = value
    return env


def test_an_otlp_endpoint_turns_the_sidecars_tracing_on_tagged_with_its_pod(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.sdk.resources import OTELResourceDetector

    from proxy.observability.tracing import exporters_from_env

    endpoint = "http://jaeger-collector.observability:4318"
    docs, _ = inject([workload("Deployment")], InjectOptions(SidecarSpec(otlp_endpoint=endpoint)))
    (herald,) = heralds(the_pod(docs[1]))
    env = _kubelet_env(herald, {"POD_NAME": "web-1", "POD_NAMESPACE": "shop",
                                "NODE_NAME": "n1"})
    assert exporters_from_env(env) == ["otlp"]
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == endpoint
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", env["OTEL_RESOURCE_ATTRIBUTES"])
    attributes = OTELResourceDetector().detect().attributes
    assert {k: attributes[k] for k in ("k8s.pod.name", "k8s.namespace.name", "k8s.node.name")
            } == {"k8s.pod.name": "web-1", "k8s.namespace.name": "shop", "k8s.node.name": "n1"}
    # Without one, nothing of tracing is set: it stays off.
    docs, _ = inject([workload("Deployment")], InjectOptions())
    (herald,) = heralds(the_pod(docs[1]))
    assert exporters_from_env(_kubelet_env(herald, {"POD_NAME": "p", "POD_NAMESPACE": "n",
                                                    "NODE_NAME": "x"})) == []


def test_cli_refuses_an_otlp_endpoint_that_is_not_an_http_url(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = _write(tmp_path / "app.yaml", workload("Deployment"))
    assert main(["k8s", "inject", str(source), "--otlp-endpoint", "jaeger:4317"]) == 2
    assert capsys.readouterr().err.startswith(
        "herald k8s inject: --otlp-endpoint: expected an http:// or https:// URL")
