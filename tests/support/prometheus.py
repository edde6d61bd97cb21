"""A real Prometheus server (Debian's `prometheus` package) for tests: started on a free
loopback port with a generated configuration that scrapes the given targets every second, and
queried through its HTTP API."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from proxy.devtools.embedded_kafka import free_port

MISSING = ("Debian's `prometheus` package is not installed (scripts/setup.sh installs it when "
           "run as root: apt-get install prometheus)")


def binary(name: str) -> str | None:
    return shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists()
                                  else None)


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, promql: str) -> list[dict]:
        """The instant vector of `promql` now: [{metric: {...}, value: float}]."""
        q = urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=10) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", body
        return [{"metric": r["metric"], "value": float(r["value"][1])}
                for r in body["data"]["result"]]

    def value(self, promql: str) -> float | None:
        """The single value of `promql` (None when the vector is empty)."""
        found = self.query(promql)
        assert len(found) <= 1, (promql, found)
        return found[0]["value"] if found else None

    def targets_up(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=10) as resp:
            active = json.loads(resp.read())["data"]["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)


@contextmanager
def running_prometheus(targets: list[str], folder: Path, interval_s: int = 1
                       ) -> Iterator[Prometheus]:
    """Prometheus scraping `targets` (HOST:PORT, path /metrics) every `interval_s`."""
    exe = binary("prometheus")
    assert exe is not None, MISSING
    port = free_port("127.0.0.1")
    config = folder / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": f"{interval_s}s", "evaluation_interval": f"{interval_s}s"},
        "scrape_configs": [{"job_name": "herald-stream", "static_configs": [
            {"targets": targets}]}]}))
    log = (folder / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [exe, f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT)
    prom = Prometheus(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (folder / "prometheus.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "prometheus did not become ready"
            time.sleep(0.2)
        yield prom
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
