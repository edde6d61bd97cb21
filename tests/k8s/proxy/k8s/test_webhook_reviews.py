"""The admission webhook's answers to AdmissionReviews of pods as controllers create them.

Each patch is applied with a JSON Patch library, as the API server applies it, and the pod it
gives is validated strictly against the Kubernetes schemas (the oldest release with native
sidecars and the newest `kubernetes-validate` knows), then compared with what `herald k8s
inject --config-in-pod` writes for the same pod: one injection, two ways in.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from herald.cli import main
from proxy.config.proxy_yaml import parse_config
from proxy.k8s import admission, sidecar
from proxy.k8s.inject import InjectOptions
from proxy.k8s.sidecar import SidecarSpec
from proxy.k8s.sizing import Throughput, cpu_millicores
from tests.support.admission_reviews import patched, pod_of, review_of
from tests.support.k8s_tools import workload
from tests.support.links import link_scope

VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
OPTIONS = InjectOptions(SidecarSpec(upstream="kafka.data:9092"), config_in_pod=True)
POD_ENV = {"POD_NAME": "web-1", "POD_NAMESPACE": "shop", "NODE_NAME": "n1"}


def _answer(pod: dict[str, Any], namespace_opted_in: bool = True,
            options: InjectOptions = OPTIONS, **review: Any) -> tuple[dict, admission.Decision]:
    request = admission.parse_review(json.dumps(review_of(pod, **review)).encode())
    decision = admission.review(request, options, namespace_opted_in)
    response = decision.review["response"]
    assert decision.review["apiVersion"] == "admission.k8s.io/v1"
    assert response["uid"] == request["uid"] and response["allowed"] is True
    return response, decision


def _valid(pod: dict[str, Any]) -> None:
    for version in VERSIONS:
        kubernetes_validate.validate(pod, version, strict=True)


def _cli(pod: dict[str, Any], tmp_path: Path, *flags: str) -> dict[str, Any]:
    source = tmp_path / "pod.yaml"
    source.write_text(yaml.safe_dump(pod))
    out = tmp_path / "out.yaml"
    assert main(["k8s", "inject", "--config-in-pod", "--upstream", "kafka.data:9092",
                 *flags, str(source), "-o", str(out)]) == 0
    (doc,) = [d for d in yaml.safe_load_all(out.read_text()) if d]
    return doc


def _app_with_init(kind: str) -> dict[str, Any]:
    doc = workload(kind, "orders", containers=[
        {"name": "app", "image": "example/app:1",
         "env": [{"name": "KAFKA_BOOTSTRAP_SERVERS", "value": "kafka:9092"}]},
        {"name": "metrics", "image": "example/exporter:1"}],
        initContainers=[{"name": "migrate", "image": "example/migrate:1"}])
    pod = doc["spec"]["template"] if kind != "CronJob" else (
        doc["spec"]["jobTemplate"]["spec"]["template"])
    if kind == "CronJob":
        pod["spec"]["restartPolicy"] = "Never"
    return doc


CASES = {
    "deployment": lambda: workload("Deployment", "web"),
    "statefulset": lambda: workload("StatefulSet", "ledger"),
    "cronjob": lambda: workload("CronJob", "report"),
    "deployment-init": lambda: _app_with_init("Deployment"),
    "cronjob-init": lambda: _app_with_init("CronJob"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_controller_made_pod_gets_the_sidecar_the_cli_would_add(case: str,
                                                                   tmp_path: Path) -> None:
    pod = pod_of(CASES[case]())
    _valid(pod)
    response, decision = _answer(pod)
    assert decision.outcome == admission.INJECTED
    after = patched(pod, response)
    _valid(after)
    assert after == _cli(pod, tmp_path)
    spec = after["spec"]
    (herald,) = [c for c in spec["initContainers"] if c["name"] == sidecar.NAME]
    assert spec["initContainers"][0] is herald and herald["restartPolicy"] == "Always"
    # The application's own init containers still run, after Herald has started.
    assert [c["name"] for c in spec["initContainers"][1:]] == [
        c["name"] for c in pod["spec"].get("initContainers", [])]
    assert after["metadata"]["annotations"][sidecar.INJECTED] == "native"
    assert after["metadata"]["labels"][sidecar.SIDECAR_LABEL] == "true"
    # The owner, the generated name and the API token volume are untouched.
    for key in ("generateName", "name", "ownerReferences", "namespace"):
        assert after["metadata"].get(key) == pod["metadata"].get(key)
    assert pod["spec"]["volumes"][0] in spec["volumes"]
    app = spec["containers"][0]
    assert {"name": "KAFKA_BOOTSTRAP_SERVERS", "value": "localhost:19092"} in app["env"]
    # The config comes with the pod, read through the downward API, and is one Herald loads.
    volume = {v["name"]: v for v in spec["volumes"]}[sidecar.CONFIG_VOLUME]
    (item,) = volume["downwardAPI"]["items"]
    assert item["fieldRef"]["fieldPath"] == (
        f"metadata.annotations['{sidecar.CONFIG_ANNOTATION}']")
    text = after["metadata"]["annotations"][sidecar.CONFIG_ANNOTATION]
    config = parse_config(yaml.safe_load(text), source=Path(item["path"]), environ=POD_ENV)
    assert str(config.upstream.bootstrap[0]) == "kafka.data:9092"


def test_an_injected_pod_is_left_as_it_is_even_after_other_webhooks_changed_it() -> None:
    """reinvocationPolicy IfNeeded: the API server calls again after a later webhook added its
    own container; the second answer adds nothing."""
    pod = pod_of(workload("Deployment", "web"))
    response, _ = _answer(pod)
    once = patched(pod, response)
    once["spec"]["containers"].append({"name": "mesh-proxy", "image": "example/mesh:1"})
    once["metadata"]["labels"]["mesh"] = "on"
    response, decision = _answer(once)
    assert decision.outcome == admission.UNCHANGED
    assert "patch" not in response and "warnings" not in response
    assert patched(once, response) == once
    # A pod made from an already injected template (`herald k8s inject` manifests) too.
    response, decision = _answer(copy.deepcopy(once), namespace_opted_in=False)
    assert decision.outcome == admission.UNCHANGED and "patch" not in response


def test_a_reinvoked_pod_gets_the_containers_added_since_pointed_at_herald() -> None:
    """A later webhook added a Kafka client container (it has the bootstrap variable): the
    reinvocation points it at Herald, and only it; the next reinvocation changes nothing."""
    pod = pod_of(workload("Deployment", "web"))
    once = patched(pod, _answer(pod)[0])
    once["spec"]["containers"].append({"name": "mesh-proxy", "image": "example/mesh:1"})
    once["spec"]["containers"].append({"name": "late-client", "image": "example/c:1", "env": [
        {"name": "KAFKA_BOOTSTRAP_SERVERS", "value": "kafka.shop:9092"},
        {"name": "OTHER", "value": "kept"}]})
    response, decision = _answer(once)
    assert decision.outcome == admission.REPOINTED, decision.reason
    twice = patched(once, response)
    _valid(twice)
    late = twice["spec"]["containers"][-1]
    assert late["env"] == [{"name": "KAFKA_BOOTSTRAP_SERVERS", "value": "localhost:19092"},
                           {"name": "OTHER", "value": "kept"}]
    assert twice["spec"]["containers"][-2] == once["spec"]["containers"][-2]  # no variable
    assert {k: v for k, v in twice.items() if k != "spec"} == {
        k: v for k, v in once.items() if k != "spec"}
    response, decision = _answer(twice)
    assert decision.outcome == admission.UNCHANGED and "patch" not in response


def test_a_reinvoked_pod_that_does_not_say_heralds_port_is_left_with_a_warning() -> None:
    """Injected with a ConfigMap (`herald k8s inject` without --config-in-pod): the pod does
    not carry its proxy.yaml, so the webhook does not know Herald's port and says so rather
    than guess."""
    fresh = pod_of(workload("Deployment", "web"))
    pod = patched(fresh, _answer(fresh)[0])
    del pod["metadata"]["annotations"][sidecar.CONFIG_ANNOTATION]
    pod["spec"]["containers"].append({"name": "late-client", "image": "example/c:1", "env": [
        {"name": "KAFKA_BOOTSTRAP_SERVERS", "value": "kafka.shop:9092"}]})
    response, decision = _answer(pod)
    assert decision.outcome == admission.UNCHANGED and "patch" not in response
    assert "'late-client'" in response["warnings"][0], response


def test_opting_in_and_out() -> None:
    def outcome(namespace_opted_in: bool, annotations: dict | None = None,
                labels: dict | None = None) -> str:
        pod = pod_of(workload("Deployment", "web"))
        pod["metadata"].setdefault("annotations", {}).update(annotations or {})
        pod["metadata"]["labels"].update(labels or {})
        response, decision = _answer(pod, namespace_opted_in)
        assert ("patch" in response) == (decision.outcome == admission.INJECTED)
        return decision.outcome

    injected, skipped = admission.INJECTED, admission.SKIPPED
    assert outcome(True) == injected
    assert outcome(False) == skipped
    assert outcome(False, {admission.INJECT: "true"}) == injected
    assert outcome(False, labels={admission.INJECT: "true"}) == injected
    # An opted-out pod in a namespace that opted in, by annotation or by label.
    assert outcome(True, {admission.INJECT: "false"}) == skipped
    assert outcome(True, labels={admission.INJECT: "false"}) == skipped
    assert outcome(False, {admission.INJECT: "false"}, {admission.INJECT: "true"}) == skipped
    assert outcome(True, {admission.INJECT: "yes"}) == admission.REFUSED


def test_annotations_override_the_defaults_for_one_pod(tmp_path: Path) -> None:
    doc = workload("Deployment", "web", containers=[
        {"name": "app", "image": "example/app:1"}, {"name": "worker", "image": "example/w:1"}])
    doc["spec"]["template"]["metadata"]["annotations"] = {
        admission.UPSTREAM: "kafka-eu-1:9093, kafka-eu-2:9093",
        admission.SCOPE: "client_id",
        admission.SIDECAR_MODE: "classic",
        admission.PRODUCE_MB_S: "40",
        admission.CONTAINERS: "worker",
    }
    pod = pod_of(doc)
    response, decision = _answer(pod)
    assert decision.outcome == admission.INJECTED and "warnings" not in response
    after = patched(pod, response)
    _valid(after)
    spec = after["spec"]
    assert "initContainers" not in spec
    app, worker, herald = spec["containers"]
    assert herald["name"] == sidecar.NAME and "restartPolicy" not in herald
    assert "env" not in app
    assert worker["env"] == [{"name": "KAFKA_BOOTSTRAP_SERVERS", "value": "localhost:19092"}]
    cpu = cpu_millicores(Throughput(produce_mb_s=40))
    assert herald["resources"]["requests"]["cpu"] == f"{cpu}m" and cpu > 200
    config = yaml.safe_load(after["metadata"]["annotations"][sidecar.CONFIG_ANNOTATION])
    assert config["upstream"]["bootstrap"] == "kafka-eu-1:9093,kafka-eu-2:9093"
    assert link_scope(config["interceptors"]) == "client_id"
    assert after == _cli(pod, tmp_path, "--upstream", "kafka-eu-1:9093,kafka-eu-2:9093",
                         "--scope", "client_id", "--classic", "--produce-mb-s", "40",
                         "--container", "worker")


@pytest.mark.parametrize("change, reason", [
    (lambda p: p["spec"].update(hostNetwork=True), "spec.hostNetwork"),
    (lambda p: p["metadata"].setdefault("annotations", {}).update(
        {admission.SIDECAR_MODE: "classic"}), "never complete"),
    (lambda p: p["spec"]["containers"].append({"name": "herald", "image": "x:1"}),
     "already exists"),
    (lambda p: p["spec"]["containers"][0].update(ports=[{"containerPort": 19092}]), "19092"),
    (lambda p: p["metadata"].setdefault("annotations", {}).update(
        {admission.UPSTREAM: "kafka"}), admission.UPSTREAM),
    (lambda p: p["metadata"].setdefault("annotations", {}).update(
        {admission.SCOPE: "cluster"}), admission.SCOPE),
    (lambda p: p["metadata"].setdefault("annotations", {}).update(
        {admission.CONSUME_MB_S: "-1"}), admission.CONSUME_MB_S),
])
def test_a_pod_that_cannot_be_injected_is_allowed_unchanged_with_a_warning(
        change: Any, reason: str) -> None:
    pod = pod_of(workload("CronJob", "report"))
    change(pod)
    response, decision = _answer(pod)
    assert decision.outcome == admission.REFUSED
    assert "patch" not in response
    (warning,) = response["warnings"]
    assert warning.startswith("herald: sidecar not injected: ") and reason in warning
    assert len(warning) <= admission.WARNING_MAX


FIXED_YAML = "upstream: {bootstrap: 'kafka.fixed:9092'}\n"


@pytest.mark.parametrize("fixed", [
    InjectOptions(SidecarSpec(), config_map="herald-sidecar"),
    InjectOptions(SidecarSpec(), proxy_yaml=FIXED_YAML, config_in_pod=True),
])
def test_a_fixed_proxy_yaml_refuses_per_pod_upstreams(fixed: InjectOptions) -> None:
    """With the webhook's own --config or --config-map every pod gets the same proxy.yaml: a
    pod asking for another cluster is told, never silently sent to the default one."""
    pod = pod_of(workload("Deployment", "web"))
    for key, value in ((admission.UPSTREAM, "other:9092"), (admission.SCOPE, "client_id")):
        pod["metadata"]["annotations"] = {key: value}
        response, decision = _answer(pod, options=fixed)
        assert decision.outcome == admission.REFUSED
        assert key in response["warnings"][0] and "--config" in response["warnings"][0]
    pod["metadata"]["annotations"] = {admission.SIDECAR_MODE: "classic"}  # not in proxy.yaml
    response, decision = _answer(pod, options=fixed)
    after = patched(pod, response)
    _valid(after)
    volume = {v["name"]: v for v in after["spec"]["volumes"]}[sidecar.CONFIG_VOLUME]
    if fixed.config_map:
        assert volume["configMap"] == {"name": "herald-sidecar"}
        assert sidecar.CONFIG_ANNOTATION not in after["metadata"]["annotations"]
    else:
        assert after["metadata"]["annotations"][sidecar.CONFIG_ANNOTATION] == FIXED_YAML


def test_what_is_not_a_pod_creation_passes_untouched() -> None:
    pod = pod_of(workload("Deployment", "web"))
    response, decision = _answer(pod, operation="UPDATE")
    assert decision.outcome == admission.SKIPPED and "patch" not in response
    body = review_of(pod)
    body["request"]["kind"] = {"group": "apps", "version": "v1", "kind": "Deployment"}
    decision = admission.review(body["request"], OPTIONS, True)
    assert decision.outcome == admission.SKIPPED
    body = review_of(pod)
    body["request"]["object"] = None
    decision = admission.review(body["request"], OPTIONS, True)
    assert decision.outcome == admission.REFUSED
    assert "request.object" in decision.review["response"]["warnings"][0]


@pytest.mark.parametrize("body, message", [
    (b"{not json", "not JSON"),
    (b"[]", "a JSON object"),
    (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}', "v1beta1"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request: required"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}',
     "request.uid"),
    (b"\xff\xfe", "not JSON"),
    (b"[" * 200_000, "nested too deeply"),
])
def test_what_is_not_an_admission_review_is_refused_with_the_reason(body: bytes,
                                                                     message: str) -> None:
    with pytest.raises(admission.ReviewError, match=message):
        admission.parse_review(body)


def test_a_bug_in_the_webhook_allows_the_pod_with_a_warning() -> None:
    pod = pod_of(workload("Deployment", "web"))
    broken = InjectOptions(SidecarSpec(), bootstrap_env=None, config_in_pod=True)  # type: ignore
    decision = admission.review(review_of(pod)["request"], broken, True)
    assert decision.outcome == admission.ERROR
    assert decision.review["response"]["allowed"] is True
    assert "internal error" in decision.review["response"]["warnings"][0]
