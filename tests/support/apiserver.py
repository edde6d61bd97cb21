"""A real Kubernetes API server (kube-apiserver and etcd, built by scripts/build-apiserver.sh)
on loopback ports, with its own CA, and a client that speaks to it as `system:masters`.

No scheduler or controller runs: pods are stored, not started, which is all an admission
webhook's tests need. The ServiceAccount admission plugin is on (as in a real cluster, it adds
the token volume before the webhooks run), so each namespace is made with its `default`
service account.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from configuration.cache import cache_root
from tests.support.background_builds import wait_for_build
from tests.support.certs import CertificateAuthority
from tests.support.herald_process import free_port_block
from tests.support.k8s_tools import tool_versions
from tests.support.required_parts import absent

BUILD_WAIT_S = 40 * 60  # scripts/test.sh builds it beside setup and the suite


def binaries() -> tuple[Path, Path]:
    """kube-apiserver and etcd, once built; waits for a build scripts/test.sh started, and
    skips (fails under HERALD_TEST_STRICT=1) with the reason when there is none."""
    versions = tool_versions()
    folder = cache_root() / "go"
    apiserver = folder / "bin" / f"kube-apiserver-{versions['KUBE_APISERVER_VERSION']}"
    etcd = folder / "bin" / f"etcd-{versions['ETCD_VERSION']}"
    status = folder / "apiserver.status"
    wait_for_build(status, BUILD_WAIT_S)
    if apiserver.is_file() and etcd.is_file():
        return apiserver, etcd
    log = folder / "apiserver-build.log"
    if not status.exists():
        why = "not built: run `bash scripts/build-apiserver.sh` (about 10 minutes of one core)"
    else:
        state = status.read_text().split()[:1] or ["?"]
        what = "still building" if state[0] == "building" else " ".join(
            status.read_text().split())
        why = f"{what}: {log.read_text()[-2000:] if log.exists() else 'no log'}"
    absent(f"the API server for the webhook's tests is {why}")


@dataclass
class ApiServer:
    url: str
    ca: Path
    context: ssl.SSLContext
    processes: list[subprocess.Popen]
    folder: Path

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=30) as response:
                text = response.read()
                kind = response.headers.get_content_type()
                return response.status, json.loads(text) if kind == "application/json" else (
                    text.decode(errors="replace"))
        except urllib.error.HTTPError as exc:
            text = exc.read()
            try:
                return exc.code, json.loads(text)
            except ValueError:
                return exc.code, text.decode(errors="replace")

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        status, answer = self.request("POST", path, body)
        assert status == 201, (status, answer)
        return answer

    def namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        """A namespace, with the `default` service account a controller would have made."""
        metadata = {"name": name, "labels": labels or {}}
        status, answer = self.request("PUT", f"/api/v1/namespaces/{name}", {
            "apiVersion": "v1", "kind": "Namespace", "metadata": metadata})
        if status == 404:  # PUT relabels the ones the API server makes (kube-system ...)
            self.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": metadata})
        else:
            assert status == 200, (status, answer)
        self.create(f"/api/v1/namespaces/{name}/serviceaccounts", {
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-4000:]
                         for p in sorted(self.folder.glob("*.log")))

    def stop(self) -> None:
        for p in reversed(self.processes):
            p.terminate()
        for p in self.processes:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def start_apiserver(folder: Path) -> ApiServer:
    apiserver, etcd = binaries()
    authority = CertificateAuthority(folder / "pki", "Kubernetes Test CA")
    serving = authority.issue("apiserver", "kube-apiserver", hosts=("127.0.0.1", "localhost"))
    admin = authority.issue("admin", "admin", org="system:masters")
    signing = ec.generate_private_key(ec.SECP256R1())
    sa_key, sa_pub = folder / "pki" / "sa.key", folder / "pki" / "sa.pub"
    sa_key.write_bytes(signing.private_bytes(serialization.Encoding.PEM,
                                             serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()))
    sa_pub.write_bytes(signing.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    base = free_port_block(4)
    client_port, peer_port, api_port = base, base + 1, base + 2
    processes = []
    etcd_log = (folder / "etcd.log").open("wb")
    processes.append(subprocess.Popen(
        [str(etcd), "--name", "test", "--data-dir", str(folder / "etcd"),
         "--listen-client-urls", f"http://127.0.0.1:{client_port}",
         "--advertise-client-urls", f"http://127.0.0.1:{client_port}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
         "--initial-cluster", f"test=http://127.0.0.1:{peer_port}",
         "--listen-metrics-urls", "", "--unsafe-no-fsync"],
        stdout=etcd_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
    api_log = (folder / "kube-apiserver.log").open("wb")
    processes.append(subprocess.Popen(
        [str(apiserver), "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
         # a loopback address cannot back the `kubernetes` Service's endpoints
         "--endpoint-reconciler-type=none", f"--secure-port={api_port}",
         f"--tls-cert-file={serving.cert}", f"--tls-private-key-file={serving.key}",
         f"--client-ca-file={authority.pem}", "--authorization-mode=RBAC",
         f"--etcd-servers=http://127.0.0.1:{client_port}",
         f"--service-account-issuer=https://127.0.0.1:{api_port}",
         f"--service-account-key-file={sa_pub}", f"--service-account-signing-key-file={sa_key}",
         "--service-cluster-ip-range=10.96.0.0/16", "--enable-priority-and-fairness=false",
         "--profiling=false", "-v=1"],
        stdout=api_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
    context = ssl.create_default_context(cafile=str(authority.pem))
    context.load_cert_chain(str(admin.cert), str(admin.key))
    server = ApiServer(f"https://127.0.0.1:{api_port}", authority.pem, context, processes,
                       folder)
    deadline = time.monotonic() + 120
    while True:
        try:
            if server.request("GET", "/readyz")[0] == 200:
                return server
        except OSError:
            pass
        if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
            server.stop()
            raise AssertionError(f"the API server did not become ready:\n{server.logs()}")
        time.sleep(0.2)
