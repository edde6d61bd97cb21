"""AdmissionReviews as the API server sends them for pods its controllers create.

A Deployment's pod comes from its ReplicaSet (`generateName`, the pod-template-hash label, an
ownerReference to the ReplicaSet), a StatefulSet's has its ordinal name and hostname, a
CronJob's comes from a Job (`batch.kubernetes.io/job-name`, restartPolicy Never). By the time
mutating webhooks see it the object has been defaulted and the ServiceAccount admission
plugin has added the API token volume, so those are here too.
"""

from __future__ import annotations

import base64
import copy
import json
import uuid
from typing import Any

import jsonpatch

from proxy.k8s.inject import TEMPLATE_PATHS

NAMESPACE = "shop"


def _defaulted(spec: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    token = "kube-api-access-x7k2p"
    for group in ("initContainers", "containers"):
        for c in spec.get(group) or []:
            c.setdefault("imagePullPolicy", "IfNotPresent")
            c.setdefault("resources", {})
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            c.setdefault("volumeMounts", []).append({
                "name": token, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "readOnly": True})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", "default")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
    spec.setdefault("tolerations", [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 300}])
    spec.setdefault("volumes", []).append({"name": token, "projected": {
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt",
                           "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}})
    return spec


def _owner(kind: str, name: str, api: str = "apps/v1") -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "name": name, "uid": str(uuid.uuid4()),
            "controller": True, "blockOwnerDeletion": True}


def pod_of(workload: dict[str, Any]) -> dict[str, Any]:
    """The Pod a controller creates from `workload` (Deployment, StatefulSet, CronJob, Job,
    DaemonSet, ReplicaSet or Pod), as the API server hands it to mutating webhooks."""
    kind, name = workload["kind"], workload["metadata"]["name"]
    template: Any = workload
    for key in TEMPLATE_PATHS[kind]:
        template = template[key]
    meta = copy.deepcopy(template.get("metadata") or {})
    meta["namespace"] = workload["metadata"].get("namespace", NAMESPACE)
    labels = meta.setdefault("labels", {})
    if kind == "Deployment":
        meta["generateName"] = f"{name}-7d9c5b6f4-"
        labels["pod-template-hash"] = "7d9c5b6f4"
        meta["ownerReferences"] = [_owner("ReplicaSet", f"{name}-7d9c5b6f4")]
    elif kind == "StatefulSet":
        meta["name"] = f"{name}-0"
        labels.update({"apps.kubernetes.io/pod-index": "0",
                       "controller-revision-hash": f"{name}-5c8d7f9b6",
                       "statefulset.kubernetes.io/pod-name": f"{name}-0"})
        meta["ownerReferences"] = [_owner("StatefulSet", name)]
    elif kind in ("CronJob", "Job"):
        job = f"{name}-29123456" if kind == "CronJob" else name
        meta["generateName"] = f"{job}-"
        uid = str(uuid.uuid4())
        labels.update({"batch.kubernetes.io/job-name": job, "job-name": job,
                       "batch.kubernetes.io/controller-uid": uid, "controller-uid": uid})
        meta["ownerReferences"] = [{**_owner("Job", job, "batch/v1"), "uid": uid}]
    elif kind != "Pod":
        meta["generateName"] = f"{name}-"
        meta["ownerReferences"] = [_owner(kind, name)]
    else:
        meta["name"] = name
    spec = _defaulted(template["spec"])
    if kind == "StatefulSet":
        spec["hostname"] = f"{name}-0"
        spec["subdomain"] = workload["spec"].get("serviceName", name)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def review_of(pod: dict[str, Any], operation: str = "CREATE",
              uid: str | None = None) -> dict[str, Any]:
    """The AdmissionReview a mutating webhook gets for `pod`."""
    meta = pod.get("metadata") or {}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", NAMESPACE),
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                         "groups": ["system:serviceaccounts", "system:authenticated"]},
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def patched(pod: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """`pod` with the response's JSONPatch applied by a JSON Patch library, as the API server
    applies it; the pod itself when there is no patch."""
    if "patch" not in response:
        assert "patchType" not in response
        return pod
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    return jsonpatch.JsonPatch(ops).apply(pod)
