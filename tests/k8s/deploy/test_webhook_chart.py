"""The chart's admission webhook (mode: webhook): who it can select, how it is called, and that
the Deployment runs the `herald k8s webhook` the injector tests exercise.

The namespace selectors are evaluated here as the API server evaluates label selectors, over
namespaces labelled as `kubectl` leaves them (`kubernetes.io/metadata.name` is set on every
namespace by the API server).
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from proxy.k8s import admission
from proxy.k8s.command import add_arguments
from proxy.k8s.sidecar_options import options_from
from tests.support.k8s_tools import CHART, documents, find, helm, helm_template

NAME_LABEL = "kubernetes.io/metadata.name"
SECRET = ("mode=webhook", "webhook.certificate.source=secret",
          "webhook.certificate.secretName=my-tls", "webhook.certificate.caBundle=Q0FCVU5ETEU=")


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels and matchExpressions) against labels."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {"In": key in labels and labels[key] in values,
              "NotIn": key not in labels or labels[key] not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def _webhooks(*sets: str, namespace: str = "herald-system") -> dict[str, dict[str, Any]]:
    docs = documents(helm_template(*sets, namespace=namespace))
    config = find(docs, "MutatingWebhookConfiguration")
    return {w["clientConfig"]["service"]["path"]: w for w in config["webhooks"]}


def _called(webhook: dict[str, Any], namespace: str, ns_labels: dict[str, str],
            pod_labels: dict[str, str]) -> bool:
    return (_selects(webhook["namespaceSelector"], {NAME_LABEL: namespace, **ns_labels})
            and _selects(webhook["objectSelector"], pod_labels))


@pytest.mark.parametrize("release_namespace", ["herald-system", "kube-system", "shop"])
def test_the_own_namespace_and_kube_system_are_never_selected(release_namespace: str) -> None:
    hooks = _webhooks("mode=webhook", "webhook.excludeNamespaces={ops,monitoring}",
                      namespace=release_namespace)
    assert set(hooks) == {"/mutate/namespace", "/mutate/pod"}
    every = ({}, {admission.INJECT: "enabled"}, {admission.INJECT: "disabled"})
    pods = ({}, {admission.INJECT: "true"}, {admission.INJECT: "false"})
    for hook in hooks.values():
        for namespace in (release_namespace, "kube-system", "ops", "monitoring"):
            for ns_labels in every:
                for pod_labels in pods:
                    assert not _called(hook, namespace, ns_labels, pod_labels), (
                        hook["name"], namespace, ns_labels, pod_labels)


def test_who_is_sent_to_which_route() -> None:
    hooks = _webhooks("mode=webhook")
    by_namespace, by_pod = hooks["/mutate/namespace"], hooks["/mutate/pod"]
    enabled, disabled = {admission.INJECT: "enabled"}, {admission.INJECT: "disabled"}
    # A namespace that opted in: every pod, except those labelled out (annotated-out ones
    # the webhook itself leaves alone); each pod is sent to one route only.
    assert _called(by_namespace, "shop", enabled, {})
    assert _called(by_namespace, "shop", enabled, {admission.INJECT: "true"})
    assert not _called(by_namespace, "shop", enabled, {admission.INJECT: "false"})
    assert not any(_called(by_pod, "shop", enabled, labels)
                   for labels in ({}, {admission.INJECT: "true"}))
    # Elsewhere only pods that opt in, and never in a namespace that opted out.
    assert _called(by_pod, "shop", {}, {admission.INJECT: "true"})
    assert not _called(by_pod, "shop", {}, {})
    assert not _called(by_namespace, "shop", {}, {admission.INJECT: "true"})
    assert not _called(by_pod, "shop", disabled, {admission.INJECT: "true"})


def test_failure_policy_timeout_and_reinvocation_are_values() -> None:
    defaults = list(_webhooks("mode=webhook").values())
    assert {(w["failurePolicy"], w["timeoutSeconds"], w["reinvocationPolicy"])
            for w in defaults} == {("Ignore", 5, "IfNeeded")}
    chosen = _webhooks("mode=webhook", "webhook.failurePolicy=Fail",
                       "webhook.timeoutSeconds=3", "webhook.reinvocationPolicy=Never").values()
    assert {(w["failurePolicy"], w["timeoutSeconds"], w["reinvocationPolicy"])
            for w in chosen} == {("Fail", 3, "Never")}
    for w in chosen:
        assert w["sideEffects"] == "None" and w["admissionReviewVersions"] == ["v1"]
        (rule,) = w["rules"]
        assert rule["operations"] == ["CREATE"] and rule["resources"] == ["pods"]
    for pair in ("webhook.failurePolicy=Maybe", "webhook.timeoutSeconds=31",
                 "webhook.reinvocationPolicy=Always", "webhook.certificate.source=vault"):
        done = helm("template", "r", str(CHART), "--kube-version", "1.34.0",
                    "--set", "mode=webhook", "--set", pair)
        assert done.returncode != 0 and "schema" in done.stderr, pair


def test_the_certificate_from_cert_manager_names_the_service_and_the_mounted_secret() -> None:
    docs = documents(helm_template("mode=webhook", namespace="herald-system"))
    named = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    cert = named[("Certificate", "r-herald-webhook")]["spec"]
    config = named[("MutatingWebhookConfiguration", "r-herald-webhook")]
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        "herald-system/r-herald-webhook")
    for hook in config["webhooks"]:
        service = hook["clientConfig"]["service"]
        assert "caBundle" not in hook["clientConfig"]
        assert f"{service['name']}.{service['namespace']}.svc" in cert["dnsNames"]
        assert ("Service", service["name"]) in named
    assert cert["issuerRef"] == {"name": "r-herald-webhook", "kind": "Issuer",
                                 "group": "cert-manager.io"}
    pod = named[("Deployment", "r-herald-webhook")]["spec"]["template"]["spec"]
    (volume,) = pod["volumes"]
    assert volume["secret"]["secretName"] == cert["secretName"]
    (container,) = pod["containers"]
    (mount,) = container["volumeMounts"]
    assert "subPath" not in mount  # a subPath mount would never see a renewed certificate
    assert f"--cert={mount['mountPath']}/tls.crt" in container["args"]
    budget = named[("PodDisruptionBudget", "r-herald-webhook")]["spec"]
    assert budget["selector"]["matchLabels"].items() <= (
        named[("Deployment", "r-herald-webhook")]["spec"]["template"]["metadata"]["labels"]
        .items())
    assert named[("Deployment", "r-herald-webhook")]["spec"]["replicas"] > budget["minAvailable"]


def test_a_certificate_of_ones_own_comes_with_its_ca_bundle() -> None:
    docs = documents(helm_template(*SECRET))
    assert not [d for d in docs if d["apiVersion"].startswith("cert-manager.io")]
    config = find(docs, "MutatingWebhookConfiguration")
    assert "annotations" not in config["metadata"]
    assert {w["clientConfig"]["caBundle"] for w in config["webhooks"]} == {"Q0FCVU5ETEU="}
    pod = find(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["volumes"][0]["secret"]["secretName"] == "my-tls"
    for missing, message in ((SECRET[:2], "webhook.certificate.secretName: required"),
                             (SECRET[:3], "webhook.certificate.caBundle: required")):
        args = [x for pair in missing for x in ("--set", pair)]
        done = helm("template", "r", str(CHART), "--kube-version", "1.34.0", *args)
        assert done.returncode != 0 and message in done.stderr


def test_the_deployment_runs_the_webhook_with_the_charts_sidecar_settings() -> None:
    """The rendered arguments are ones `herald k8s webhook` accepts, and describe the sidecar
    the chart's values ask for."""
    sets = ("mode=webhook", "upstream.bootstrap=kafka.data:9093", "image.tag=9.9.9",
            "sidecar.native=false", "upstream.tls.enabled=true", "webhook.scope=client_id",
            "webhook.produceMBs=12", "webhook.bootstrapEnv={KAFKA_BROKERS,BOOTSTRAP}")
    container = find(documents(helm_template(*sets)), "Deployment")["spec"]["template"][
        "spec"]["containers"][0]
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert container["args"][0] == "k8s"  # the image runs `herald`
    args = parser.parse_args(container["args"][1:])
    assert args.k8s_command == "webhook" and args.health_listen == "0.0.0.0:9465"
    options = options_from(args, config_in_pod=True)
    spec = options.spec
    assert (spec.upstream, spec.image, spec.native, spec.link_scope) == (
        "kafka.data:9093", "herald:9.9.9", False, "client_id")
    assert spec.upstream_tls_secret == "herald-upstream-tls"
    assert spec.load.produce_mb_s == 12
    assert options.bootstrap_env == ("KAFKA_BROKERS", "BOOTSTRAP")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["readinessProbe"]["httpGet"]["port"] == "webhook-health"
    assert ports["webhook-health"] == 9465 and args.listen == f"0.0.0.0:{ports['webhook']}"


def test_the_webhook_pods_take_reviews_and_probes_only_and_call_nothing() -> None:
    docs = documents(helm_template("mode=webhook"))
    named = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    policy = named[("NetworkPolicy", "r-herald-webhook")]["spec"]
    pod = named[("Deployment", "r-herald-webhook")]["spec"]["template"]
    assert policy["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    ports = {p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    assert policy["policyTypes"] == ["Ingress", "Egress"] and policy["egress"] == []
    assert {p["port"] for rule in policy["ingress"] for p in rule["ports"]} == ports
    # The Service sends the API server's calls to a port the policy lets in.
    service = named[("Service", "r-herald-webhook")]["spec"]["ports"][0]
    named_ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    assert named_ports[service["targetPort"]] in ports
    # No other workload of the release is selected by it.
    for (kind, name), doc in named.items():
        if kind == "Deployment" and name != "r-herald-webhook":
            labels = doc["spec"]["template"]["metadata"]["labels"]
            assert not policy["podSelector"]["matchLabels"].items() <= labels.items()
