"""The Kubernetes tools scripts/setup.sh installs (versions in deploy/tools.env), and renders."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from proxy.devtools.kafka_dist import cache_root

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CHART = DEPLOY / "helm" / "herald"
KUBE_VERSION = "1.34.0"  # what `helm template` renders for (the chart needs 1.29+)


def tool_versions() -> dict[str, str]:
    out = {}
    for line in (DEPLOY / "tools.env").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def helm_path() -> Path:
    path = cache_root() / "go" / "bin" / f"helm-{tool_versions()['HELM_VERSION']}"
    assert path.exists(), f"{path} is missing: scripts/setup.sh builds it"
    return path


def checkov_path() -> Path:
    path = cache_root() / "tools" / f"checkov-{tool_versions()['CHECKOV_VERSION']}" / "bin" / (
        "checkov")
    assert path.exists(), f"{path} is missing: scripts/setup.sh installs it"
    return path


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm_path()), *args], capture_output=True, text=True, timeout=120)


def helm_template(*sets: str, namespace: str = "shop", release: str = "r",
                  values: Path | None = None) -> str:
    """`helm template` of the chart with `--set` pairs; fails the test with helm's error."""
    args = ["template", release, str(CHART), "--namespace", namespace,
            "--kube-version", KUBE_VERSION]
    if values is not None:
        args += ["-f", str(values)]
    for pair in sets:
        args += ["--set", pair]
    done = helm(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def find(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


# ---- sample workloads for the injector's tests ------------------------------------------

def pod_spec(*names: str, **extra: Any) -> dict[str, Any]:
    return {"containers": [{"name": n, "image": f"example/{n}:1"} for n in names or ("app",)],
            **extra}


def workload(kind: str, name: str = "web", **pod: Any) -> dict[str, Any]:
    """A small valid manifest of `kind`; `pod` replaces or extends its pod spec."""
    template = {"metadata": {"labels": {"app": name}}, "spec": pod_spec(**pod)
                if "containers" not in pod else pod}
    doc: dict[str, Any] = {"apiVersion": "apps/v1", "kind": kind,
                           "metadata": {"name": name, "namespace": "shop"}}
    if kind == "Pod":
        doc["apiVersion"] = "v1"
        doc["spec"] = template["spec"]
    elif kind == "CronJob":
        doc["apiVersion"] = "batch/v1"
        template["spec"]["restartPolicy"] = "Never"
        doc["spec"] = {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}
    else:
        doc["spec"] = {"selector": {"matchLabels": {"app": name}}, "template": template}
        if kind == "StatefulSet":
            doc["spec"]["serviceName"] = name
        if kind == "Job":
            doc["apiVersion"] = "batch/v1"
            template["spec"]["restartPolicy"] = "Never"
            del doc["spec"]["selector"]
    return doc
