"""The Herald sidecar: its container, its volumes, and the ConfigMap holding its proxy.yaml.

One place builds these, so the injector, the example manifests in `deploy/kubernetes/` (made
by the injector) and the tests all agree on names, paths and ports. The Helm chart renders the
same shapes from its own templates; the tests compare the two.

Paths are those `proxy.yaml` refers to: the config at /etc/herald/config/proxy.yaml, TLS and
SASL material from Secrets under /etc/herald/. The config folder is not /etc/herald itself
because a ConfigMap volume is read-only and the Secret mounts need mount points of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from interceptors.trace_links import LinkConfig
from proxy.k8s.sizing import Throughput, link_capacity, resources
from proxy.routing.config import STATE_DIR_ENV

NAME = "herald"
CONFIG_VOLUME = "herald-config"
CONFIG_DIR = "/etc/herald/config"
CONFIG_PATH = f"{CONFIG_DIR}/proxy.yaml"
UPSTREAM_TLS_DIR = "/etc/herald/upstream-tls"
SASL_DIR = "/etc/herald/sasl"
# Writable, and kept while the pod lives: the routing journal (routing.journal: auto) is
# there, so a Herald container the kubelet restarts finds it (docs/routing.md).
STATE_VOLUME = "herald-state"
STATE_DIR = "/var/lib/herald"
ADMIN_PORT_NAME = "herald-admin"
LISTEN_PORT = 19092
BROKER_PORT_BASE = 19100
ADMIN_PORT = 9464
RUN_AS = 10001  # the image's user (deploy/Dockerfile)
INSTANCE_ID = "${POD_NAMESPACE}/${POD_NAME}@${NODE_NAME}"
SHUTDOWN_GRACE_S = 20
RELOAD_WATCH_S = 5
LINK_SCOPE = "host"  # one sidecar per pod: the pod's clients all come from loopback
# The annotation that marks a pod template as injected, and the label PodMonitors select on.
INJECTED = "herald.io/injected"
SIDECAR_LABEL = "herald.io/sidecar"
# The annotation that carries proxy.yaml when the pod holds its own config (the webhook's way).
CONFIG_ANNOTATION = "herald.io/proxy-yaml"
LINK_SCOPES = ("host", "client_id")
PRE_STOP_S = 5

_DOWNWARD = (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace"),
             ("NODE_NAME", "spec.nodeName"))


@dataclass(frozen=True)
class SidecarSpec:
    """What differs between injections; everything else is fixed by this module."""

    upstream: str = "kafka:9092"
    image: str = "herald:0.1.0"
    native: bool = True  # restartable init container (Kubernetes 1.29+); else a plain container
    load: Throughput = field(default_factory=Throughput)
    upstream_tls_secret: str | None = None
    sasl_secret: str | None = None
    sasl_mechanism: str = "SCRAM-SHA-512"
    # Taken from the proxy.yaml in use (a user's own file may choose other ports).
    listen_port: int = LISTEN_PORT
    broker_port_base: int = BROKER_PORT_BASE
    admin_port: int = ADMIN_PORT
    shutdown_grace_s: float = SHUTDOWN_GRACE_S
    link_scope: str = LINK_SCOPE  # of the causal links: one of LINK_SCOPES
    otlp_endpoint: str = ""  # where Herald's spans go (OTLP over HTTP); empty: no tracing

    def __post_init__(self) -> None:
        if self.link_scope not in LINK_SCOPES:
            raise ValueError(f"scope: expected one of {', '.join(LINK_SCOPES)}, "
                             f"got {self.link_scope!r}")
        if self.otlp_endpoint and not self.otlp_endpoint.startswith(("http://", "https://")):
            raise ValueError("otlp-endpoint: expected an http:// or https:// URL (OTLP over "
                             f"HTTP, port 4318 by convention), got {self.otlp_endpoint!r}")


def tracing_env(endpoint: str) -> list[dict[str, Any]]:
    """The sidecar's OpenTelemetry variables (docs/observability.md#traces): spans over OTLP
    to `endpoint`, each tagged with the pod, namespace and node it came from (Kubernetes
    expands `$(VAR)` from the variables before it). None without an endpoint."""
    if not endpoint:
        return []
    pod = ",".join(f"k8s.{key}.name=$({var})" for key, var in (
        ("pod", "POD_NAME"), ("namespace", "POD_NAMESPACE"), ("node", "NODE_NAME")))
    return [{"name": "OTEL_TRACES_EXPORTER", "value": "otlp"},
            {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": endpoint},
            {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": pod}]


def _link(spec: SidecarSpec) -> dict[str, Any]:
    """The sidecar's `link` settings: its scope, and a capacity only where the pod's declared
    rate asks for less than the shipped one (`sizing.link_capacity`)."""
    link: dict[str, Any] = {"scope": spec.link_scope}
    capacity = link_capacity(spec.load)
    if capacity < LinkConfig().capacity:
        link["capacity"] = capacity
    return link


def proxy_config(spec: SidecarSpec) -> dict[str, Any]:
    """The proxy.yaml of a sidecar: loopback listeners for the application, the admin endpoint
    on every address for the kubelet's probes and Prometheus, the pod's identity in audit, and
    causal links scoped by `host`: every client of the pod reaches its sidecar from loopback,
    so the pod is the scope and its consumer and producer are linked whatever their client ids
    (Java's and librdkafka's defaults differ). Several services in one pod that read the same
    traces would share the memory; such a pod wants `scope: client_id` and shared client ids.
    The links' memory is sized from the pod's declared consume rate (`sizing.link_capacity`)."""
    upstream: dict[str, Any] = {"bootstrap": spec.upstream}
    if spec.upstream_tls_secret:
        upstream["tls"] = {
            "ca_file": f"{UPSTREAM_TLS_DIR}/ca.crt",
            "cert_file": f"{UPSTREAM_TLS_DIR}/tls.crt",
            "key_file": f"{UPSTREAM_TLS_DIR}/tls.key",
        }
    if spec.sasl_secret:
        upstream["sasl"] = {
            "mechanism": spec.sasl_mechanism,
            "username": {"file": f"{SASL_DIR}/username"},
            "password": {"file": f"{SASL_DIR}/password"},
        }
    return {
        "upstream": upstream,
        "listen": {
            "bootstrap": f"127.0.0.1:{spec.listen_port}",
            "advertised_host": "localhost",
            "broker_port_base": spec.broker_port_base,
        },
        "admin": {"bind": f"0.0.0.0:{spec.admin_port}"},
        "instance": {"id": INSTANCE_ID},
        "reload": {"watch_s": RELOAD_WATCH_S},
        "shutdown": {"grace_s": spec.shutdown_grace_s},
        "logging": {"level": "warning", "format": "json"},
        "interceptors": {
            "produce": [{"type": "trace_context", "link": _link(spec)}, {"type": "audit"}],
            "fetch": [],
        },
    }


def config_map(name: str, namespace: str | None, proxy_yaml: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    metadata["labels"] = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "proxy"}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
            "data": {"proxy.yaml": proxy_yaml}}


def dump_config(config: dict[str, Any]) -> str:
    return yaml.safe_dump(config, sort_keys=False)


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": ADMIN_PORT_NAME}, "periodSeconds": period,
            "timeoutSeconds": 2, "failureThreshold": failures}


def container(spec: SidecarSpec) -> dict[str, Any]:
    """The sidecar container.

    Probes: startup and liveness on /healthz (the event loop answers), readiness on /readyz
    (listening, upstream answered lately, not draining). Startup does not wait for the
    upstream: with a native sidecar it gates the application's start, and an application
    should start (and report its own state) while Kafka is away.
    """
    c: dict[str, Any] = {
        "name": NAME,
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["run", "--config", CONFIG_PATH],
    }
    if spec.native:
        c["restartPolicy"] = "Always"
    c["ports"] = [{"name": ADMIN_PORT_NAME, "containerPort": spec.admin_port, "protocol": "TCP"}]
    c["env"] = [{"name": var, "valueFrom": {"fieldRef": {"fieldPath": path}}}
                for var, path in _DOWNWARD]
    c["env"].append({"name": STATE_DIR_ENV, "value": STATE_DIR})
    c["env"] += tracing_env(spec.otlp_endpoint)
    c["resources"] = resources(spec.load)
    c["startupProbe"] = _probe("/healthz", 1, 30)
    c["readinessProbe"] = _probe("/readyz", 5, 2)
    c["livenessProbe"] = _probe("/healthz", 10, 3)
    if not spec.native:
        # A plain container gets SIGTERM together with the application: wait before it, so
        # the application's last requests still find Herald listening. (A native sidecar is
        # only stopped once the application containers have exited.) Exec, not a shell: the
        # image has none.
        c["lifecycle"] = {"preStop": {"exec": {"command": [
            "python3", "-c", f"import time; time.sleep({PRE_STOP_S})"]}}}
    c["securityContext"] = {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    mounts = [{"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR, "readOnly": True},
              {"name": STATE_VOLUME, "mountPath": STATE_DIR}]
    if spec.upstream_tls_secret:
        mounts.append({"name": "herald-upstream-tls", "mountPath": UPSTREAM_TLS_DIR,
                       "readOnly": True})
    if spec.sasl_secret:
        mounts.append({"name": "herald-sasl", "mountPath": SASL_DIR, "readOnly": True})
    c["volumeMounts"] = mounts
    return c


def volumes(spec: SidecarSpec, config_map_name: str | None) -> list[dict[str, Any]]:
    """The sidecar's volumes: proxy.yaml from the ConfigMap named, or (None) from the pod's
    own CONFIG_ANNOTATION through the downward API."""
    config: dict[str, Any] = {"configMap": {"name": config_map_name}}
    if config_map_name is None:
        config = {"downwardAPI": {"items": [{
            "path": "proxy.yaml",
            "fieldRef": {"fieldPath": f"metadata.annotations['{CONFIG_ANNOTATION}']"}}]}}
    out: list[dict[str, Any]] = [{"name": CONFIG_VOLUME, **config},
                                 {"name": STATE_VOLUME, "emptyDir": {}}]
    if spec.upstream_tls_secret:
        out.append({"name": "herald-upstream-tls",
                    "secret": {"secretName": spec.upstream_tls_secret}})
    if spec.sasl_secret:
        out.append({"name": "herald-sasl",
                    "secret": {"secretName": spec.sasl_secret}})
    return out


def termination_grace_s(spec: SidecarSpec) -> int:
    """Time the pod needs after SIGTERM: Herald's drain, the classic pre-stop wait, margin."""
    return int(spec.shutdown_grace_s) + (0 if spec.native else PRE_STOP_S) + 10
