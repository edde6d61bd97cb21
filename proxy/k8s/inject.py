"""Add the Herald sidecar to the pod templates of Kubernetes workload manifests.

Like a service mesh's injector, but offline: manifests in, manifests out. Every workload
(Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob, Pod, and those inside a `List`)
gets one Herald container, the volume of its config, the pod's identity for the audit
headers, and its applications' bootstrap variables pointed at Herald; a ConfigMap with the
sidecar's proxy.yaml is written just before the workload. Anything else (Services, ConfigMaps,
custom resources) passes through as it is.

Injection is idempotent: a pod template that carries the `herald.io/injected` annotation is
left exactly as it is. Whatever would give a pod that cannot work is refused with the document
and the path of the field at fault, and nothing is written.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from proxy.k8s import sidecar
from proxy.k8s.sidecar import SidecarSpec

# Where the pod template is, per kind; () means the document is the pod itself.
TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": (),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
# Ports of the application containers that would collide with Herald's in the shared network
# namespace: its listener, its admin endpoint, and this many broker ports above the base.
BROKER_PORT_WINDOW = 256


class InjectError(ValueError):
    """A manifest Herald cannot add its sidecar to; the message names the document and path."""


@dataclass(frozen=True)
class InjectOptions:
    spec: SidecarSpec = field(default_factory=SidecarSpec)
    # Environment variables of the application containers that hold the Kafka bootstrap.
    bootstrap_env: tuple[str, ...] = ("KAFKA_BOOTSTRAP_SERVERS",)
    # Which containers get them, added where missing. Default: those that already have them
    # (a pod's only application container gets them in any case): a metrics exporter or log
    # shipper beside the application is not handed a Kafka address it never asked for.
    containers: tuple[str, ...] = ()
    # An existing ConfigMap with the sidecar's proxy.yaml: referenced, none is written.
    config_map: str | None = None
    # The proxy.yaml to write into the ConfigMap (default: `sidecar.proxy_config(spec)`).
    proxy_yaml: str | None = None
    # proxy.yaml in the pod's own annotation (sidecar.CONFIG_ANNOTATION), mounted through the
    # downward API: no ConfigMap, so a pod made by an admission webhook carries all it needs.
    config_in_pod: bool = False


@dataclass
class Report:
    injected: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    # Injected workloads where no container was given a bootstrap variable.
    unpointed: list[str] = field(default_factory=list)


class _Where:
    """Where errors point: a name for the object, then the path of the field at fault."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, path: str, reason: str) -> InjectError:
        return InjectError(f"{self.where}: {path}: {reason}")


class _Doc(_Where):
    """A document of a manifest stream: its position and identity."""

    def __init__(self, index: int, doc: dict[str, Any]) -> None:
        found = doc.get("metadata")
        meta = found if isinstance(found, dict) else {}
        self.kind = doc.get("kind")
        self.name = meta.get("name")
        self.where = f"document {index}"
        if self.kind:
            self.where += f" ({self.kind}/{self.name or '?'})"


def inject(documents: list[Any], options: InjectOptions) -> tuple[list[Any], Report]:
    """The documents with the sidecar added, and which workloads were injected or left."""
    report = Report()
    out: list[Any] = []
    for index, doc in enumerate(copy.deepcopy(documents), start=1):
        if doc is None:  # an empty document between two `---`
            continue
        out.extend(_document(doc, _Doc(index, doc) if isinstance(doc, dict) else None,
                             index, options, report))
    return out, report


def _document(doc: Any, where: _Doc | None, index: int, options: InjectOptions,
              report: Report) -> Iterator[Any]:
    if where is None:
        raise InjectError(f"document {index}: expected a Kubernetes object (a mapping), "
                          f"got {type(doc).__name__}")
    for key in ("apiVersion", "kind"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            raise where.fail(key, "required: not a Kubernetes object")
    if doc["kind"] == "List":
        items = doc.get("items")
        if not isinstance(items, list):
            raise where.fail("items", "expected a list")
        new_items: list[Any] = []
        for i, item in enumerate(items):
            inner = _Doc(index, item) if isinstance(item, dict) else None
            if inner is not None:
                inner.where = f"{where.where} items[{i}]" + (
                    f" ({inner.kind}/{inner.name or '?'})" if inner.kind else "")
            new_items.extend(_document(item, inner, index, options, report))
        yield {**doc, "items": new_items}
        return
    path = TEMPLATE_PATHS.get(doc["kind"])
    if path is None:
        yield doc
        return
    yield from _workload(doc, path, where, options, report)


def _workload(doc: dict[str, Any], path: tuple[str, ...], where: _Doc, options: InjectOptions,
              report: Report) -> Iterator[Any]:
    template = doc
    walked: list[str] = []
    for key in path:
        walked.append(key)
        inner = template.get(key)
        if not isinstance(inner, dict):
            raise where.fail(".".join(walked), "expected a mapping")
        template = inner
    found = doc.get("metadata")
    meta = found if isinstance(found, dict) else {}
    result = inject_pod(template, options, kind=doc["kind"], where=where,
                        prefix=".".join(path) + "." if path else "",
                        config_map_name=f"{where.name}-herald" if where.name else None,
                        namespace=meta.get("namespace"))
    label = f"{where.kind}/{where.name}"
    if not result.injected:
        report.unchanged.append(label)
    else:
        report.injected.append(label)
        if not result.pointed:
            report.unpointed.append(label)
    if result.config_map is not None:
        yield result.config_map
    yield doc


@dataclass
class PodResult:
    """What `inject_pod` did: `injected` is False for a pod already marked injected (left as
    it was); `config_map` is the ConfigMap to create with it, if any."""

    injected: bool
    pointed: bool = False
    config_map: dict[str, Any] | None = None


def inject_pod(template: dict[str, Any], options: InjectOptions, *, kind: str = "Pod",
               where: _Where | str = "Pod", prefix: str = "",
               config_map_name: str | None = None, namespace: str | None = None) -> PodResult:
    """Add the sidecar to one pod (a Pod object or a workload's pod template: `metadata` and
    `spec`), in place. The one injection both `herald k8s inject` and the admission webhook
    run. `kind` is the workload's (a classic sidecar is refused for Jobs), `where` and
    `prefix` how errors name the object and the path to the template in it, and
    `config_map_name` the ConfigMap to write when neither an existing one nor the pod's own
    annotation carries proxy.yaml. Raises `InjectError` before changing anything."""
    if isinstance(where, str):
        where = _Where(where)
    meta = template.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise where.fail(prefix + "metadata", "expected a mapping")
    pod = template.get("spec")
    if not isinstance(pod, dict):
        raise where.fail(prefix + "spec", "expected a mapping (the pod spec)")
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        raise where.fail(prefix + "metadata.annotations", "expected a mapping")
    if sidecar.INJECTED in annotations:
        return PodResult(injected=False)
    _check_pod(pod, prefix + "spec", where, kind, options)
    spec = options.spec
    text = options.proxy_yaml or sidecar.dump_config(sidecar.proxy_config(spec))
    config_map = options.config_map
    written = None
    if options.config_in_pod:
        annotations = {**annotations, sidecar.CONFIG_ANNOTATION: text}
    elif config_map is None:
        if not config_map_name:
            raise where.fail(prefix + "metadata.name",
                             "required: it names the Herald ConfigMap (or give an existing one "
                             "with --config-map)")
        config_map = config_map_name
        written = sidecar.config_map(config_map, namespace, text)

    apps = pod["containers"]
    pointed = point_apps(apps, options, spec.listen_port, add_single=True)
    if spec.native:
        pod["initContainers"] = [sidecar.container(spec), *(pod.get("initContainers") or [])]
    else:
        apps.append(sidecar.container(spec))
    pod["volumes"] = [*(pod.get("volumes") or []),
                      *sidecar.volumes(spec, None if options.config_in_pod else config_map)]
    pod["terminationGracePeriodSeconds"] = max(
        pod.get("terminationGracePeriodSeconds") or 30, sidecar.termination_grace_s(spec))
    meta["annotations"] = {
        **annotations, sidecar.INJECTED: "native" if spec.native else "classic",
    }
    meta["annotations"].setdefault("kubectl.kubernetes.io/default-container", apps[0]["name"])
    labels = meta.get("labels") or {}
    meta["labels"] = {**labels, sidecar.SIDECAR_LABEL: "true"}
    return PodResult(injected=True, pointed=pointed, config_map=written)


def point_apps(apps: list[dict[str, Any]], options: InjectOptions, port: int,
               add_single: bool) -> bool:
    """Point the application containers' bootstrap variables at Herald's listener on `port`:
    those named in `options.containers` (given the variable if they lack it), else every
    container that has one (`add_single`: a pod's only container is given it too). Whether
    one points at Herald now."""
    pointed = False
    for c in apps:
        if options.containers:
            if c["name"] in options.containers:
                pointed |= _point_at_herald(c, options.bootstrap_env, port, add=True)
        else:
            pointed |= _point_at_herald(c, options.bootstrap_env, port,
                                        add=add_single and len(apps) == 1)
    return pointed


def _point_at_herald(container: dict[str, Any], names: tuple[str, ...], port: int,
                     add: bool) -> bool:
    """Set each of `names` the container has to Herald's listener (`add`: also those it has
    not); whether it has one now."""
    env = container.get("env") or []
    value = f"localhost:{port}"
    pointed = False
    for name in names:
        for i, entry in enumerate(env):
            if entry.get("name") == name:
                env[i] = {"name": name, "value": value}
                pointed = True
                break
        else:
            if add:
                env.append({"name": name, "value": value})
                pointed = True
    if env:
        container["env"] = env
    return pointed


def _check_pod(pod: dict[str, Any], path: str, where: _Where, kind: str,
               options: InjectOptions) -> None:
    """Refuse what would give a pod that cannot work, before anything is changed."""
    spec = options.spec
    apps = pod.get("containers")
    if not isinstance(apps, list) or not apps:
        raise where.fail(f"{path}.containers", "expected a non-empty list of containers")
    inits = pod.get("initContainers") or []
    if not isinstance(inits, list):
        raise where.fail(f"{path}.initContainers", "expected a list")
    for key, group in (("containers", apps), ("initContainers", inits)):
        for i, c in enumerate(group):
            if not isinstance(c, dict) or not isinstance(c.get("name"), str):
                raise where.fail(f"{path}.{key}[{i}]", "expected a container with a name")
            if c["name"] == sidecar.NAME:
                raise where.fail(f"{path}.{key}[{i}].name",
                                 f"a container named {sidecar.NAME!r} already exists but the pod "
                                 f"is not marked {sidecar.INJECTED}")
            env = c.get("env") or []
            if not isinstance(env, list) or not all(isinstance(e, dict) for e in env):
                raise where.fail(f"{path}.{key}[{i}].env", "expected a list of mappings")
            _check_ports(c, f"{path}.{key}[{i}]", where, spec)
    volumes = pod.get("volumes") or []
    if not isinstance(volumes, list):
        raise where.fail(f"{path}.volumes", "expected a list")
    taken = {v.get("name") for v in volumes if isinstance(v, dict)}
    ours: set[str] = {v["name"] for v in sidecar.volumes(spec, "-")}
    if ours & taken:
        raise where.fail(f"{path}.volumes", f"volume {sorted(ours & taken)[0]!r} already exists")
    missing = set(options.containers) - {c["name"] for c in apps}
    if missing:
        raise where.fail(f"{path}.containers",
                         f"no container named {sorted(missing)[0]!r} (given with --container)")
    if pod.get("hostNetwork"):
        raise where.fail(f"{path}.hostNetwork",
                         "Herald's ports would be opened on the node, shared by every pod there; "
                         "run it in gateway mode instead")
    if not spec.native:
        restart = pod.get("restartPolicy", "Always")
        if kind in ("Job", "CronJob") or restart != "Always":
            raise where.fail(f"{path}.restartPolicy" if restart != "Always" else "kind",
                             "a classic sidecar never exits, so this pod would never complete: "
                             "use the native sidecar (Kubernetes 1.29+)")


def _check_ports(c: dict[str, Any], path: str, where: _Where, spec: SidecarSpec) -> None:
    ports = c.get("ports") or []
    if not isinstance(ports, list):
        raise where.fail(f"{path}.ports", "expected a list")
    reserved = {spec.listen_port: "its listener", spec.admin_port: "its admin endpoint"}
    for j, p in enumerate(ports):
        number = p.get("containerPort") if isinstance(p, dict) else None
        if not isinstance(number, int):
            raise where.fail(f"{path}.ports[{j}].containerPort", "expected a port number")
        why = reserved.get(number)
        if why is None and spec.broker_port_base <= number < (
                spec.broker_port_base + BROKER_PORT_WINDOW):
            why = "its broker ports"
        if why is not None:
            raise where.fail(f"{path}.ports[{j}].containerPort",
                             f"port {number} is Herald's ({why}) in the pod's shared network")
