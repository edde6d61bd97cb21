"""A real Prometheus server (Debian's `prometheus` package) for tests: started on a free
loopback port with a generated configuration that scrapes the given targets every second, and
queried through its HTTP API."""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from proxy.devtools.embedded_kafka import free_port
from tests.support.processes import stop, wait_ready
from tests.support.required_parts import PROMETHEUS, binary, require


class Prometheus:
    def __init__(self, url: str, at: str | None = None) -> None:
        self.url = url
        self.at = at  # the time queries are evaluated at (Prometheus's notation); None: now

    def _results(self, promql: str) -> list[dict]:
        params = {"query": promql}
        if self.at is not None:
            params["time"] = self.at
        q = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=10) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", body
        return body["data"]["result"]

    def query(self, promql: str) -> list[dict]:
        """The instant vector of `promql`: [{metric: {...}, value: float}]."""
        return [{"metric": r["metric"], "value": float(r["value"][1])}
                for r in self._results(promql)]

    def value(self, promql: str) -> float | None:
        """The single value of `promql` (None when the vector is empty)."""
        found = self.query(promql)
        assert len(found) <= 1, (promql, found)
        return found[0]["value"] if found else None

    def at_scrape(self, series: str) -> Prometheus | None:
        """This server, its queries evaluated at the newest successful scrape that holds
        `series` (None: none holds it now). Every answer then comes from that one scrape,
        whatever scrapes follow: a scrape that fails (over its timeout, which is the scrape
        interval here) marks every series of the target stale, and until the next one
        succeeds a query evaluated now finds none of them."""
        found = self._results(f"timestamp({series})")
        assert len(found) <= 1, (series, found)
        return Prometheus(self.url, at=found[0]["value"][1]) if found else None


@contextmanager
def running_prometheus(targets: list[str], folder: Path, interval_s: int = 1
                       ) -> Iterator[Prometheus]:
    """Prometheus scraping `targets` (HOST:PORT, path /metrics) every `interval_s`."""
    require(PROMETHEUS)
    exe = binary("prometheus")
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
        def ready() -> bool:
            with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as resp:
                return resp.status == 200

        wait_ready(proc, folder / "prometheus.log", ready, "prometheus")
        yield prom
    finally:
        stop(proc, 10)
        log.close()
