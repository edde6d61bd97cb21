"""The admission webhook's answer to one AdmissionReview: which pods get the sidecar, and how.

A pod is injected when its namespace opted in (the API server calls `/mutate/namespace` only
for pods of namespaces the MutatingWebhookConfiguration selects) or when the pod itself asks
(label or annotation `herald.io/inject: "true"`, on `/mutate/pod`), unless its annotation or
label says `herald.io/inject: "false"`. Annotations under `herald.io/` override the
webhook's defaults for one pod (ANNOTATIONS). The injection is `inject.inject_pod`, the
one `herald k8s inject` runs, on a copy of the pod; the answer is the JSON Patch between the
two.

The webhook never blocks a pod: a pod it cannot inject, or a review it does not understand
but can answer (its uid is readable), is allowed unchanged with a warning that `kubectl`
shows and a log event. Only a request that is not an AdmissionReview at all gets an HTTP
error (`ReviewError`), which the API server treats by the webhook's `failurePolicy`.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from proxy.k8s import sidecar
from proxy.k8s.inject import InjectError, InjectOptions, inject_pod, point_apps
from proxy.k8s.json_patch import diff
from proxy.k8s.sizing import Throughput
from proxy.observability.logs import get_logger

log = get_logger("webhook")

API_VERSION = "admission.k8s.io/v1"
PREFIX = "herald.io/"
INJECT = PREFIX + "inject"
UPSTREAM = PREFIX + "upstream"
SCOPE = PREFIX + "scope"
SIDECAR_MODE = PREFIX + "sidecar-mode"
PRODUCE_MB_S = PREFIX + "produce-mb-s"
CONSUME_MB_S = PREFIX + "consume-mb-s"
CONTAINERS = PREFIX + "containers"
ANNOTATIONS = {
    INJECT: '"true": inject this pod (also as a label); "false": never (also as a label)',
    UPSTREAM: "bootstrap HOST:PORT[,HOST:PORT] of the cluster this pod's Herald relays to",
    SCOPE: "scope of the causal links: host or client_id",
    SIDECAR_MODE: "native (restartable init container) or classic (a plain container)",
    PRODUCE_MB_S: "expected produce MB/s, for the sidecar's CPU request",
    CONSUME_MB_S: "expected consume MB/s, for the sidecar's CPU request",
    CONTAINERS: "comma-separated containers that get the bootstrap variable",
}
# Outcomes, as counted in herald_webhook_reviews_total{outcome}.
INJECTED, UNCHANGED, SKIPPED = "injected", "unchanged", "skipped"
REPOINTED = "repointed"  # reinvoked: containers added since were pointed at Herald
REFUSED, ERROR = "refused", "error"
WARNING_MAX = 256  # the API server may truncate longer warnings
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})$")
# Annotations that change proxy.yaml: they cannot apply to a fixed one (--config, --config-map).
_CONFIG_KEYS = (UPSTREAM, SCOPE)


class ReviewError(ValueError):
    """A request that is not an AdmissionReview the webhook can answer; HTTP 400."""


@dataclass
class Decision:
    """The answer to one review: the AdmissionReview to send and what to count and log."""

    review: dict[str, Any]
    outcome: str
    reason: str = ""
    warnings: list[str] = field(default_factory=list)


def parse_review(body: bytes) -> dict[str, Any]:
    """The review's `request`, or ReviewError saying why there is none to answer."""
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ReviewError(f"the body is not JSON: {exc}") from None
    except RecursionError:
        raise ReviewError("the body is not JSON Herald reads: nested too deeply") from None
    if not isinstance(doc, dict):
        raise ReviewError("expected an AdmissionReview (a JSON object)")
    if doc.get("kind") != "AdmissionReview" or doc.get("apiVersion") != API_VERSION:
        raise ReviewError(f"expected kind AdmissionReview, apiVersion {API_VERSION}; got kind "
                          f"{doc.get('kind')!r}, apiVersion {doc.get('apiVersion')!r}")
    request = doc.get("request")
    if not isinstance(request, dict):
        raise ReviewError("request: required: the AdmissionReview has no request")
    if not isinstance(request.get("uid"), str) or not request["uid"]:
        raise ReviewError("request.uid: required: the answer must carry it back")
    return request


def review(request: dict[str, Any], options: InjectOptions, namespace_opted_in: bool,
           ) -> Decision:
    """The Decision for a parsed review's request; never raises."""
    uid = request["uid"]
    try:
        decision = _decide(request, options, namespace_opted_in)
    except Exception as exc:  # a bug here must not turn into a blocked pod
        log.error("review_failed", uid=uid, exc_info=exc)
        decision = _allow(uid, ERROR, f"internal error ({type(exc).__name__}); "
                                      "the pod is created without the Herald sidecar")
        decision.warnings = [_warning(decision.reason)]
        decision.review["response"]["warnings"] = decision.warnings
    return decision


def _decide(request: dict[str, Any], options: InjectOptions, namespace_opted_in: bool,
            ) -> Decision:
    uid = request["uid"]
    kind = request.get("kind") or {}
    if (kind.get("group"), kind.get("kind")) != ("", "Pod") or request.get("subResource"):
        return _allow(uid, SKIPPED, f"not a Pod: {kind.get('kind')!r}")
    if request.get("operation") != "CREATE":
        return _allow(uid, SKIPPED, f"operation {request.get('operation')}: only CREATE injects")
    pod = request.get("object")
    if not isinstance(pod, dict) or not isinstance(pod.get("spec"), dict):
        return _refuse(uid, "request.object: expected the Pod being created")
    found = pod.get("metadata")
    meta = found if isinstance(found, dict) else {}
    found = meta.get("annotations")
    annotations = found if isinstance(found, dict) else {}
    found = meta.get("labels")
    labels = found if isinstance(found, dict) else {}
    if sidecar.INJECTED in annotations:
        return _reinvoked(uid, pod, annotations, options)
    asked = [v for v in (annotations.get(INJECT), labels.get(INJECT)) if v is not None]
    bad = [v for v in asked if v not in ("true", "false")]
    if bad:
        return _refuse(uid, f"{INJECT}: expected \"true\" or \"false\", got {bad[0]!r}")
    if "false" in asked:
        return _allow(uid, SKIPPED, f"opted out ({INJECT}: false)")
    if "true" not in asked and not namespace_opted_in:
        return _allow(uid, SKIPPED, f"not opted in (no {INJECT}: true)")
    try:
        pod_options = _overrides(annotations, options)
    except ValueError as exc:
        return _refuse(uid, str(exc))
    owners = meta.get("ownerReferences") or []
    owner = owners[0].get("kind") if owners and isinstance(owners[0], dict) else None
    patched = copy.deepcopy(pod)
    namespace = request.get("namespace") or meta.get("namespace") or "?"
    name = meta.get("name") or meta.get("generateName") or request.get("name") or "?"
    try:
        result = inject_pod(patched, pod_options, kind=owner if owner in ("Job",) else "Pod",
                            where=f"Pod {namespace}/{name}")
    except InjectError as exc:
        return _refuse(uid, str(exc))
    decision = _allow(uid, INJECTED, "sidecar added")
    response = decision.review["response"]
    response["patchType"] = "JSONPatch"
    response["patch"] = base64.b64encode(json.dumps(diff(pod, patched)).encode()).decode()
    if not result.pointed:
        decision.warnings.append(_warning(
            f"herald: no container has {', '.join(pod_options.bootstrap_env)}: none was pointed "
            f"at Herald (name the application's with the {CONTAINERS} annotation)"))
        response["warnings"] = decision.warnings
    return decision


def _reinvoked(uid: str, pod: dict[str, Any], annotations: dict[str, Any],
               options: InjectOptions) -> Decision:
    """A pod that has the sidecar: under reinvocationPolicy IfNeeded, the API server calls
    again after a later webhook changed it. A container that webhook added with a bootstrap
    variable is pointed at Herald, as `inject_pod` points the pod's own; nothing else changes.
    Herald's port is read from the proxy.yaml the pod carries (the webhook's pods); a pod
    injected with a ConfigMap does not say it, so its containers are left and a warning says
    which were not pointed."""
    unchanged = _allow(uid, UNCHANGED, "already injected")
    apps = [c for c in pod["spec"].get("containers") or []
            if isinstance(c, dict) and c.get("name") != sidecar.NAME]
    try:
        pod_options = _overrides(annotations, options)
    except ValueError:
        return unchanged  # said when the pod was injected
    port = _listen_port(annotations.get(sidecar.CONFIG_ANNOTATION))
    if port is None:
        elsewhere = [c.get("name") for c in apps if any(
            isinstance(e, dict) and e.get("name") in pod_options.bootstrap_env
            and not str(e.get("value", "")).startswith("localhost:")
            for e in c.get("env") or [])]
        if elsewhere:
            unchanged.warnings = [_warning(
                f"herald: container {elsewhere[0]!r} has a bootstrap variable not pointed at "
                "Herald, and this pod does not say Herald's port (injected with a ConfigMap): "
                "left as it is")]
            unchanged.review["response"]["warnings"] = unchanged.warnings
        return unchanged
    patched = copy.deepcopy(pod)
    point_apps([c for c in patched["spec"]["containers"] if c.get("name") != sidecar.NAME],
               pod_options, port, add_single=False)
    ops = diff(pod, patched)
    if not ops:
        return unchanged
    decision = _allow(uid, REPOINTED, "already injected; containers added since pointed at "
                                      "Herald")
    response = decision.review["response"]
    response["patchType"] = "JSONPatch"
    response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
    return decision


def _listen_port(text: Any) -> int | None:
    """The port of `listen.bootstrap` in a pod's proxy.yaml annotation, if it says one."""
    if not isinstance(text, str):
        return None
    try:
        config = yaml.safe_load(text)
        port = int(str(config["listen"]["bootstrap"]).rsplit(":", 1)[1])
    except (yaml.YAMLError, TypeError, KeyError, IndexError, ValueError):
        return None
    return port if 0 < port < 65536 else None


def _overrides(annotations: dict[str, Any], options: InjectOptions) -> InjectOptions:
    """The webhook's options with this pod's annotations applied; ValueError names the bad
    annotation."""
    given = {k: v for k, v in annotations.items() if k in ANNOTATIONS and k != INJECT}
    for key, value in given.items():
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{key}: expected a non-empty string")
    fixed = [k for k in _CONFIG_KEYS if k in given]
    if fixed and (options.proxy_yaml is not None or options.config_map is not None):
        raise ValueError(f"{fixed[0]}: cannot apply: the webhook gives every pod the same "
                         "proxy.yaml (its --config or --config-map)")
    spec = options.spec
    changes: dict[str, Any] = {}
    if UPSTREAM in given:
        servers = [s.strip() for s in given[UPSTREAM].split(",")]
        for server in servers:
            m = _HOST_PORT.match(server)
            if m is None or not 0 < int(m.group(2)) < 65536:
                raise ValueError(f"{UPSTREAM}: expected HOST:PORT[,HOST:PORT], got "
                                 f"{given[UPSTREAM]!r}")
        changes["upstream"] = ",".join(servers)
    if SCOPE in given:
        if given[SCOPE] not in sidecar.LINK_SCOPES:
            raise ValueError(f"{SCOPE}: expected one of {', '.join(sidecar.LINK_SCOPES)}, got "
                             f"{given[SCOPE]!r}")
        changes["link_scope"] = given[SCOPE]
    if SIDECAR_MODE in given:
        if given[SIDECAR_MODE] not in ("native", "classic"):
            raise ValueError(f"{SIDECAR_MODE}: expected native or classic, got "
                             f"{given[SIDECAR_MODE]!r}")
        changes["native"] = given[SIDECAR_MODE] == "native"
    if PRODUCE_MB_S in given or CONSUME_MB_S in given:
        rates = {}
        for key, attr in ((PRODUCE_MB_S, "produce_mb_s"), (CONSUME_MB_S, "consume_mb_s")):
            text = given.get(key)
            try:
                rates[attr] = getattr(spec.load, attr) if text is None else float(text)
                changes["load"] = Throughput(**{**dataclasses.asdict(spec.load), **rates})
            except ValueError:
                raise ValueError(f"{key}: expected a number >= 0, got {text!r}") from None
    out = dataclasses.replace(options, spec=dataclasses.replace(spec, **changes))
    if CONTAINERS in given:
        names = tuple(n.strip() for n in given[CONTAINERS].split(",") if n.strip())
        out = dataclasses.replace(out, containers=names)
    return out


def _warning(text: str) -> str:
    text = "".join(c if c.isprintable() else " " for c in text)
    return text if len(text) <= WARNING_MAX else text[:WARNING_MAX - 3] + "..."


def _allow(uid: str, outcome: str, reason: str) -> Decision:
    response = {"uid": uid, "allowed": True}
    return Decision({"apiVersion": API_VERSION, "kind": "AdmissionReview",
                     "response": response}, outcome, reason)


def _refuse(uid: str, reason: str) -> Decision:
    """Not injected, but allowed: the pod runs without Herald and its creator is told why."""
    decision = _allow(uid, REFUSED, reason)
    decision.warnings = [_warning(f"herald: sidecar not injected: {reason}")]
    decision.review["response"]["warnings"] = decision.warnings
    return decision
