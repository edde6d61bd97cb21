"""`herald k8s webhook` behind a real Kubernetes API server, registered with the
MutatingWebhookConfiguration the Helm chart renders (its selectors, failure and reinvocation
policies as they are; only the Service address is replaced by the webhook's loopback URL).

The API server decides who is sent to the webhook, applies its JSON patches, validates the
patched pod, stores it, calls the webhook again when a later webhook changed the pod, and
creates the pod anyway when the webhook is gone (failurePolicy: Ignore). Pods are stored, not
run: no scheduler or kubelet is needed to see what a user's pod would be.
"""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from proxy.k8s import sidecar
from tests.support.apiserver import ApiServer, start_apiserver
from tests.support.certs import CertificateAuthority
from tests.support.k8s_tools import documents, find, helm_template
from tests.support.webhook_process import Webhook, events, issue, restart, start_webhook

RELEASE_NAMESPACE = "herald-system"
BOOTSTRAP = "KAFKA_BOOTSTRAP_SERVERS"
LATE = "late-client"  # the container a later webhook adds


@dataclass
class Cluster:
    api: ApiServer
    webhook: Webhook


class LateWebhook(http.server.BaseHTTPRequestHandler):
    """Another mutating webhook, called after Herald's: it adds a Kafka client container, as
    a platform's own injector might."""

    def do_POST(self) -> None:  # noqa: N802 - the http.server name
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        patch = [{"op": "add", "path": "/spec/containers/-", "value": {
            "name": LATE, "image": "example/late:1",
            "env": [{"name": BOOTSTRAP, "value": "kafka.data:9092"}]}}]
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                           "response": {"uid": review["request"]["uid"], "allowed": True,
                                        "patchType": "JSONPatch",
                                        "patch": base64.b64encode(json.dumps(patch).encode())
                                        .decode()}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _serve_late_webhook(authority: CertificateAuthority) -> http.server.HTTPServer:
    issued = issue(authority, "late")
    server = http.server.HTTPServer(("127.0.0.1", 0), LateWebhook)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(issued.cert), str(issued.key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _chart_configuration(webhook: Webhook) -> dict[str, Any]:
    """The chart's MutatingWebhookConfiguration, calling the webhook process on loopback."""
    config = find(documents(helm_template(
        "mode=webhook", "webhook.certificate.source=secret",
        "webhook.certificate.secretName=herald-webhook-tls",
        "webhook.certificate.caBundle=" + base64.b64encode(webhook.ca.read_bytes()).decode(),
        namespace=RELEASE_NAMESPACE)), "MutatingWebhookConfiguration")
    for hook in config["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{webhook.port}{path}",
                                "caBundle": hook["clientConfig"]["caBundle"]}
    return config


def _pod(name: str | None = None, labels: dict[str, str] | None = None,
         annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod as a ReplicaSet makes it (generateName, an owner), or a named one."""
    meta: dict[str, Any] = {"labels": {"app": "checkout", **(labels or {})},
                            "annotations": annotations or {}}
    if name is None:
        meta["generateName"] = "checkout-7d9c5b6f4-"
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                    "name": "checkout-7d9c5b6f4", "uid": str(uuid.uuid4()),
                                    "controller": True}]
    else:
        meta["name"] = name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [
        {"name": "app", "image": "example/checkout:1",
         "env": [{"name": BOOTSTRAP, "value": "kafka.data:9092"}]}]}}


def _create(api: ApiServer, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the API server stored it."""
    return api.create(f"/api/v1/namespaces/{namespace}/pods", pod)


def _herald(pod: dict[str, Any]) -> dict[str, Any] | None:
    spec = pod["spec"]
    found = [c for c in (spec.get("initContainers") or []) + spec["containers"]
             if c["name"] == sidecar.NAME]
    return found[0] if found else None


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    folder = tmp_path_factory.mktemp("apiserver")
    api = start_apiserver(folder / "api")
    webhook = start_webhook(folder / "webhook")
    late = _serve_late_webhook(webhook.authority)
    try:
        api.namespace("shop", {"herald.io/inject": "enabled"})
        api.namespace("plain")
        api.namespace(RELEASE_NAMESPACE, {"herald.io/inject": "enabled"})
        api.namespace("kube-system", {"herald.io/inject": "enabled"})
        api.create("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
                   _chart_configuration(webhook))
        # A later webhook, for pods labelled late-client=yes only; it names itself so that
        # the API server calls it after Herald's (configurations go in name order).
        ca = base64.b64encode(webhook.ca.read_bytes()).decode()
        api.create("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration", "metadata": {"name": "zz-late-client"},
            "webhooks": [{
                "name": "late-client.example.com", "admissionReviewVersions": ["v1"],
                "sideEffects": "None", "failurePolicy": "Fail", "timeoutSeconds": 5,
                "clientConfig": {"url": f"https://127.0.0.1:{late.server_port}/",
                                 "caBundle": ca},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""],
                           "apiVersions": ["v1"], "resources": ["pods"]}],
                "objectSelector": {"matchLabels": {LATE: "yes"}}}]})
        # The API server reads configurations through an informer: wait until both are used.
        deadline = time.monotonic() + 60
        while True:
            probe = _create(api, "shop", _pod(labels={LATE: "yes"}))
            names = [c["name"] for c in probe["spec"]["containers"]]
            api.request("DELETE", f"/api/v1/namespaces/shop/pods/{probe['metadata']['name']}")
            if _herald(probe) is not None and LATE in names:
                break
            assert time.monotonic() < deadline, f"webhooks never called:\n{api.logs()}"
            time.sleep(0.2)
        yield Cluster(api, webhook)
    finally:
        late.shutdown()
        if webhook.proc.poll() is None:
            webhook.proc.kill()
            webhook.proc.wait()
        api.stop()


def test_a_controller_made_pod_in_an_opted_in_namespace_is_stored_with_the_sidecar(
    cluster: Cluster,
) -> None:
    stored = _create(cluster.api, "shop", _pod())
    herald = _herald(stored)
    assert herald is not None, stored
    spec = stored["spec"]
    # The native sidecar: a restartable init container, first, so it starts before the app.
    assert spec["initContainers"][0]["name"] == sidecar.NAME
    assert herald["restartPolicy"] == "Always"
    assert herald["securityContext"]["readOnlyRootFilesystem"] is True
    meta = stored["metadata"]
    assert meta["annotations"][sidecar.INJECTED] == "native"
    assert meta["labels"][sidecar.SIDECAR_LABEL] == "true"
    assert meta["name"].startswith("checkout-7d9c5b6f4-")  # named by the API server after
    (app,) = spec["containers"]
    assert _env(app)[BOOTSTRAP] == f"localhost:{sidecar.LISTEN_PORT}"
    volumes = {v["name"]: v for v in spec["volumes"]}
    # The pod's proxy.yaml through the downward API, Herald's state on an emptyDir, beside the
    # service account token the API server's own admission added before the webhooks ran.
    assert set(volumes[sidecar.CONFIG_VOLUME]["downwardAPI"]["items"][0]["fieldRef"]) == {
        "apiVersion", "fieldPath"}
    assert "emptyDir" in volumes[sidecar.STATE_VOLUME]
    assert any(name.startswith("kube-api-access-") for name in volumes)
    config = meta["annotations"][sidecar.CONFIG_ANNOTATION]
    assert "127.0.0.1:19092" in config and "kafka.data:9092" in config


def test_who_the_api_server_sends_to_the_webhook(cluster: Cluster) -> None:
    api = cluster.api

    def injected(namespace: str, **pod: Any) -> bool:
        return _herald(_create(api, namespace, _pod(**pod))) is not None

    assert injected("shop")
    assert not injected("shop", labels={"herald.io/inject": "false"})  # opted out
    assert not injected("plain")
    assert injected("plain", labels={"herald.io/inject": "true"})  # the pod opts in
    # Never the webhook's own namespace nor kube-system, whatever their labels say.
    assert not injected(RELEASE_NAMESPACE)
    assert not injected("kube-system")
    assert not injected("kube-system", labels={"herald.io/inject": "true"})


def test_a_container_a_later_webhook_adds_is_pointed_at_herald_on_reinvocation(
    cluster: Cluster,
) -> None:
    stored = _create(cluster.api, "shop", _pod(labels={LATE: "yes"}))
    assert _herald(stored) is not None
    containers = {c["name"]: c for c in stored["spec"]["containers"]}
    assert set(containers) == {"app", LATE}
    assert _env(containers[LATE])[BOOTSTRAP] == f"localhost:{sidecar.LISTEN_PORT}"
    assert _env(containers["app"])[BOOTSTRAP] == f"localhost:{sidecar.LISTEN_PORT}"
    outcomes = [e.get("outcome") for e in events(cluster.webhook.log) if e["event"] == "review"]
    assert "repointed" in outcomes


def test_a_pod_with_a_bad_annotation_is_created_without_the_sidecar_and_a_warning(
    cluster: Cluster,
) -> None:
    stored = _create(cluster.api, "shop", _pod(annotations={"herald.io/upstream": "no port"}))
    assert _herald(stored) is None
    refused = [e for e in events(cluster.webhook.log) if e.get("outcome") == "refused"]
    assert any("herald.io/upstream" in e.get("reason", "") for e in refused), refused


def test_with_the_webhook_gone_pods_are_created_without_it(cluster: Cluster) -> None:
    """failurePolicy: Ignore (the chart's default): a webhook outage never blocks a pod,
    and once the webhook is back the next pod gets the sidecar again (the webhook is
    restarted whatever happens, so no other test depends on running before this one)."""
    cluster.webhook.proc.kill()
    cluster.webhook.proc.wait()
    try:
        stored = _create(cluster.api, "shop", _pod(name="during-outage"))
        assert _herald(stored) is None
        assert _env(stored["spec"]["containers"][0])[BOOTSTRAP] == "kafka.data:9092"
    finally:
        restart(cluster.webhook)
    after = _create(cluster.api, "shop", _pod(name="after-outage"))
    assert _herald(after) is not None


def test_the_webhook_logged_no_error(cluster: Cluster) -> None:
    """Every review above was answered by design, none by the webhook's error path."""
    logged = events(cluster.webhook.log)
    assert [e for e in logged if e["event"] == "review"]
    assert not [e for e in logged if e.get("level") == "error"], logged
