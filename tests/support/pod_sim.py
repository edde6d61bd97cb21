"""A Kubernetes pod simulated on this machine, the way the kubelet would run it.

The pod is a network namespace (its own loopback, shared by its containers) joined to the host
by a veth pair; the host side plays the node, from which probes are sent to the pod's address,
and the rest of the cluster (the Kafka broker). Containers are processes started from the
pod spec's own values: args, env (with the downward API resolved), volume mounts (mapped to
folders holding the ConfigMap's files), the user of the securityContext, probes as HTTP GETs
with the spec's period, timeout and failure threshold.

Addresses are from 198.18.0.0/15, the block set aside for testing network devices.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOST_IP = "198.18.0.1"
POD_IP = "198.18.0.2"


class NamespacesUnavailable(Exception):
    """This machine cannot give the test a network namespace (the reason is the message)."""


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise NamespacesUnavailable(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")


PREFIX = "herald-pod-"


def _remove_left_behind() -> None:
    """Delete the pod namespaces a run that was killed left behind (one suite has one pod
    network at a time). Their veth holds the same addresses, so the kernel would route this
    pod's traffic and probes to a namespace where nothing listens. Deleting a namespace
    deletes its veth, and with it the host's end."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    for line in listed.stdout.splitlines():
        name = line.split(" ", 1)[0]
        if name.startswith(PREFIX):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


@dataclass
class PodNetwork:
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    created: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{PREFIX}{self.tag}"

    def create(self) -> PodNetwork:
        if os.geteuid() != 0:
            raise NamespacesUnavailable("creating a network namespace needs root")
        for tool, package in (("ip", "iproute2"), ("setpriv", "util-linux")):
            if shutil.which(tool) is None:
                raise NamespacesUnavailable(f"the `{tool}` command ({package}) is not installed")
        host_if, pod_if = f"hv{self.tag}", f"pv{self.tag}"
        _remove_left_behind()
        _ip("netns", "add", self.name)
        self.created.append("netns")
        _ip("link", "add", host_if, "type", "veth", "peer", "name", pod_if)
        self.created.append(host_if)
        _ip("link", "set", pod_if, "netns", self.name)
        _ip("addr", "add", f"{HOST_IP}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        for args in (("addr", "add", f"{POD_IP}/30", "dev", pod_if),
                     ("link", "set", pod_if, "up"), ("link", "set", "lo", "up")):
            _ip("-n", self.name, *args)
        return self

    def delete(self) -> None:
        if "netns" in self.created:
            subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        for link in self.created[1:]:
            subprocess.run(["ip", "link", "del", link], capture_output=True)

    def run_prefix(self, security: dict[str, Any] | None = None) -> list[str]:
        """A command prefix that runs inside the pod, as the securityContext's user."""
        prefix = ["ip", "netns", "exec", self.name]
        if security and security.get("runAsUser") is not None:
            uid = str(security["runAsUser"])
            gid = str(security.get("runAsGroup", uid))
            prefix += ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
            if security.get("allowPrivilegeEscalation") is False:
                prefix.append("--no-new-privs")
            if "ALL" in security.get("capabilities", {}).get("drop", []):
                prefix += ["--inh-caps=-all", "--bounding-set=-all"]
        return prefix


def http_get(url: str, timeout: float) -> tuple[int | None, str]:
    """Status and body of a GET, or None and the reason when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode().strip()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode().strip()
    except OSError as exc:
        return None, str(exc)


@contextlib.contextmanager
def readable_folder(prefix: str) -> Iterator[Path]:
    """A temporary folder the containers' unprivileged users can read (pytest's tmp_path is
    private to root)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@dataclass
class Pod:
    """Identity the downward API hands out."""

    name: str
    namespace: str
    node: str = field(default_factory=socket.gethostname)

    def field(self, path: str) -> str:
        return {"metadata.name": self.name, "metadata.namespace": self.namespace,
                "spec.nodeName": self.node, "status.podIP": POD_IP}[path]


class Container:
    """One container of the pod spec, run as a process in the pod's network namespace."""

    def __init__(self, spec: dict[str, Any], pod: Pod, network: PodNetwork,
                 entrypoint: list[str], volumes: dict[str, Path], log: Path,
                 extra_env: dict[str, str] | None = None) -> None:
        self.spec = spec
        self.pod = pod
        self.network = network
        self.entrypoint = entrypoint
        self.mounts = {m["mountPath"]: volumes[m["name"]] for m in spec.get("volumeMounts", [])}
        self.log = log
        self.extra_env = extra_env or {}
        self.process: subprocess.Popen[bytes] | None = None

    def env(self) -> dict[str, str]:
        # The "image": this checkout's Python first on PATH, as the venv is in Herald's image.
        path = f"{os.path.dirname(PYTHON)}:/usr/local/bin:/usr/bin:/bin"
        out = {"PATH": path, "PYTHONDONTWRITEBYTECODE": "1", **self.extra_env}
        for entry in self.spec.get("env", []):
            if "value" in entry:  # a path in a mounted volume points into its folder
                out[entry["name"]] = self._host_path(entry["value"])
            else:
                out[entry["name"]] = self.pod.field(entry["valueFrom"]["fieldRef"]["fieldPath"])
        return out

    def _host_path(self, arg: str) -> str:
        for mount, folder in self.mounts.items():
            if arg == mount or arg.startswith(mount + "/"):
                return str(folder) + arg[len(mount):]
        return arg

    def argv(self) -> list[str]:
        return [*self.entrypoint, *(self._host_path(a) for a in self.spec.get("args", []))]

    def start(self) -> Container:
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [*self.network.run_prefix(self.spec.get("securityContext")), *self.argv()],
                env=self.env(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd="/",
            )
        return self

    def port(self, name: str) -> int:
        return next(p["containerPort"] for p in self.spec["ports"] if p["name"] == name)

    def probe_once(self, kind: str) -> tuple[int | None, str]:
        """One HTTP GET of the probe, from the node to the pod's address."""
        get = self.spec[kind]["httpGet"]
        port = get["port"] if isinstance(get["port"], int) else self.port(get["port"])
        return http_get(f"http://{POD_IP}:{port}{get['path']}", self.spec[kind]["timeoutSeconds"])

    def probe_until(self, kind: str) -> list[tuple[int | None, str]]:
        """Probe at the spec's period until it succeeds (200-399) or fails failureThreshold
        times in a row; every answer, in order."""
        spec = self.spec[kind]
        answers: list[tuple[int | None, str]] = []
        failures = 0
        while failures < spec["failureThreshold"]:
            if self.process is not None and self.process.poll() is not None:
                answers.append((None, f"container exited with {self.process.returncode}"))
                return answers
            status, body = self.probe_once(kind)
            answers.append((status, body))
            if status is not None and 200 <= status < 400:
                return answers
            failures += 1
            time.sleep(spec["periodSeconds"])
        return answers

    def pre_stop(self) -> None:
        hook = self.spec.get("lifecycle", {}).get("preStop", {}).get("exec")
        if hook:
            subprocess.run([*self.network.run_prefix(self.spec.get("securityContext")),
                            *hook["command"]], env=self.env(), timeout=120, check=True)

    def terminate(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)

    def wait(self, deadline: float) -> int | None:
        """Exit status, or None when the deadline passed (then the process is killed)."""
        assert self.process is not None
        try:
            return self.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
            return None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def rss_mib(self) -> float:
        """Resident memory of the container's main process (the last in its exec chain)."""
        assert self.process is not None
        pid = self.process.pid
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0


PYTHON = sys.executable
