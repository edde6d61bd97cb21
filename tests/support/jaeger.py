"""A real Jaeger v2 (built from the Go module proxy by scripts/build-jaeger.sh, version in
deploy/tools.env) for tests: in-memory storage, OTLP over HTTP in, the query service's HTTP
API out, all on free loopback ports."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from configuration.cache import cache_root
from proxy.devtools.embedded_kafka import free_port
from tests.support.background_builds import wait_for_build
from tests.support.k8s_tools import tool_versions
from tests.support.processes import stop, wait_ready
from tests.support.required_parts import absent

BUILD_WAIT_S = 30 * 60  # scripts/test.sh builds it beside the suite


def binary() -> Path:
    """The Jaeger binary, once built; waits for a build scripts/test.sh started, and skips
    (fails under HERALD_TEST_STRICT=1) with the reason when there is none."""
    folder = cache_root() / "go"
    path = folder / "bin" / f"jaeger-{tool_versions()['JAEGER_VERSION']}"
    status = folder / "jaeger.status"
    wait_for_build(status, BUILD_WAIT_S)
    if path.is_file():
        return path
    log = folder / "jaeger-build.log"
    what = " ".join(status.read_text().split()) if status.exists() else "not built"
    absent(f"Jaeger is {what}: run `bash scripts/build-jaeger.sh` (about 3 minutes); "
           f"{log.read_text()[-2000:] if log.exists() else 'no build log'}")


@dataclass(frozen=True)
class Jaeger:
    otlp: str   # OTLP/HTTP endpoint, as OTEL_EXPORTER_OTLP_ENDPOINT takes it
    query: str  # the query service's HTTP base URL

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(self.query + path, timeout=10) as resp:
            return json.loads(resp.read())

    def services(self) -> list[str]:
        return sorted(self.get("/api/services")["data"] or [])

    def trace(self, trace_id: str) -> list[dict]:
        """The spans of one trace (the v3 API's OTLP JSON, each span with its service name
        added as `service`); [] while Jaeger does not have it."""
        return self._spans(f"/api/v3/traces/{trace_id}")

    def spans_of(self, service: str, since_s: float) -> list[dict]:
        """Every span of the traces of `service` that began after `since_s` (epoch)."""
        start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since_s - 1))
        end = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 60))
        return self._spans(f"/api/v3/traces?query.service_name={service}"
                           f"&query.start_time_min={start}&query.start_time_max={end}"
                           "&query.num_traces=1000")

    def _spans(self, path: str) -> list[dict]:
        try:
            body = self.get(path)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return []
            raise
        spans = []
        for resource in body.get("result", {}).get("resourceSpans", []):
            service = next((a["value"].get("stringValue") for a in
                            resource.get("resource", {}).get("attributes", [])
                            if a["key"] == "service.name"), None)
            for scope in resource.get("scopeSpans", []):
                for span in scope.get("spans", []):
                    spans.append({**span, "service": service})
        return spans

    def dependencies(self, lookback_s: int = 3600) -> list[dict]:
        end = int(time.time() * 1000)
        return self.get(f"/api/dependencies?endTs={end}&lookback={lookback_s * 1000}")["data"] or []


@contextmanager
def running_jaeger(folder: Path) -> Iterator[Jaeger]:
    otlp, query, grpc, health = (free_port("127.0.0.1") for _ in range(4))
    config = folder / "jaeger.yaml"
    config.write_text(yaml.safe_dump({
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query", "healthcheckv2"],
            "pipelines": {"traces": {"receivers": ["otlp"], "processors": ["batch"],
                                     "exporters": ["jaeger_storage_exporter"]}},
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "warn"}},
        },
        "extensions": {
            "jaeger_query": {"storage": {"traces": "memstore"},
                             "http": {"endpoint": f"127.0.0.1:{query}"},
                             "grpc": {"endpoint": f"127.0.0.1:{grpc}"}},
            "jaeger_storage": {"backends": {"memstore": {"memory": {"max_traces": 100000}}}},
            "healthcheckv2": {"use_v2": True, "http": {"endpoint": f"127.0.0.1:{health}"}},
        },
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{otlp}"}}}},
        "processors": {"batch": {"timeout": "200ms"}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": "memstore"}},
    }))
    log = (folder / "jaeger.log").open("w")
    proc = subprocess.Popen([str(binary()), "--config", str(config)], stdout=log,
                            stderr=subprocess.STDOUT)
    jaeger = Jaeger(f"http://127.0.0.1:{otlp}", f"http://127.0.0.1:{query}")
    try:
        wait_ready(proc, folder / "jaeger.log", lambda: jaeger.services() is not None, "Jaeger")
        yield jaeger
    finally:
        stop(proc, 10)
        log.close()
