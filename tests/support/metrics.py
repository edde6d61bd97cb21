"""Herald's /metrics read over real HTTP: a scrape as samples, sums over labels, the difference
between two scrapes, and a wait until a scrape shows what a test expects."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from tests.support.herald_process import HeraldProcess

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def scrape(proc: HeraldProcess) -> Samples:
    status, text = http_get(proc.admin_url + "/metrics")
    assert status == 200
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples named `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, lbl), v in samples.items() if n == name and want <= set(lbl))


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return total(after, name, **labels) - total(before, name, **labels)


def wait_for(proc: HeraldProcess, check: Callable[[Samples], bool], timeout: float = 10) -> Samples:
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(proc)
        if check(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.1)


def by_labels(before: dict, after: dict, name: str) -> dict:
    """Every series of a counter family that moved, by its labels (topic labels aside)."""
    out = {}
    for (metric, labels), value in after.items():
        if metric == name:
            delta = value - before.get((metric, labels), 0)
            if delta:
                out[labels] = delta
    return out
