"""Metric label cardinality under hostile input, against a real broker.

Clients choose the API key and version of every request header. Each never-seen pair must be
counted without creating a new series: the series count of /metrics stays flat.
"""

from __future__ import annotations

import random
import socket
import struct
import urllib.request
from collections.abc import Iterator

import pytest

from proxy.devtools.embedded_kafka import KafkaCluster, free_port
from tests.support.herald_process import HeraldProcess, herald_config

PAIRS = 30_000
KNOWN_KEYS = (3, 8, 9, 10, 11, 12, 32, 60)
# Known keys no chain member reads: Herald forwards them in any version (Metadata,
# FindCoordinator and DescribeCluster, which address rewriting reads, end the connection by
# name past the codec, as a broker does on a version it does not know).
FORWARDED_KEYS = (8, 9, 11, 12, 32)
PER_CONNECTION = 900  # below limits.max_in_flight, so Herald reads all of them at once


@pytest.fixture(scope="module")
def herald_admin(kafka: KafkaCluster) -> Iterator[HeraldProcess]:
    config = herald_config(kafka.bootstrap, admin={"bind": f"127.0.0.1:{free_port()}"})
    with HeraldProcess(config) as proc:
        yield proc


def scrape(proc: HeraldProcess) -> list[str]:
    with urllib.request.urlopen(proc.admin_url + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def unknown_requests(lines: list[str]) -> float:
    """Requests counted with a folded version (every API key, known or not)."""
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in lines
        if line.startswith("herald_requests_total{") and 'version="unknown"' in line
    )


def request(api_key: int, version: int, corr: int) -> bytes:
    client_id = b"hostile"
    body = struct.pack(">hhih", api_key, version, corr, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def send_pairs(bootstrap: str, pairs: list[tuple[int, int]]) -> None:
    """Send the requests on one connection and wait until the broker (through Herald) closes
    it, as it does on a request it cannot parse."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"".join(request(k, v, i) for i, (k, v) in enumerate(pairs)))
        try:
            while sock.recv(65536):
                pass
        except OSError:
            pass


def hostile_pairs(n: int, seed: int = 13) -> list[tuple[int, int]]:
    """Never-seen pairs: API keys no Kafka release defines, and known keys no member reads
    with versions far past any release."""
    rng = random.Random(seed)
    pairs: set[tuple[int, int]] = set()
    while len(pairs) < n:
        if rng.random() < 0.5:
            pairs.add((rng.randrange(200, 32768), rng.randrange(0, 32768)))
        else:
            pairs.add((rng.choice(FORWARDED_KEYS), rng.randrange(200, 32768)))
    return sorted(pairs, key=lambda _: rng.random())


def test_series_count_stays_flat_under_never_seen_api_keys_and_versions(
    herald_admin: HeraldProcess,
) -> None:
    # One request per API first: the series of each API and of `unknown` then exist.
    for warm_up in [(5000, 5000), *((k, 5000) for k in KNOWN_KEYS)]:
        send_pairs(herald_admin.bootstrap, [warm_up])
    before = scrape(herald_admin)
    pairs = hostile_pairs(PAIRS)
    for i in range(0, len(pairs), PER_CONNECTION):
        send_pairs(herald_admin.bootstrap, pairs[i : i + PER_CONNECTION])
    after = scrape(herald_admin)
    series_before = {line.rsplit(" ", 1)[0] for line in before}
    series_after = {line.rsplit(" ", 1)[0] for line in after}
    assert series_after - series_before == set()
    assert len(after) == len(before)
    # The hostile requests were counted, under the folded label value.
    counted = unknown_requests(after) - unknown_requests(before)
    assert counted >= PAIRS * 0.9, counted
