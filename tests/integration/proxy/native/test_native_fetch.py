"""The native relay scanning Fetch responses (`performance.native_relay: auto` with a
`drop_headers` fetch chain) through a real broker, compared with the Python path (`off`):
a librdkafka consumer gets the same records and headers either way, the dropped headers never
reach it, the chain's counters match, and most Fetch responses never leave the engine, with
the batches uncompressed or compressed (lz4, zstd, gzip, snappy: the engine reads them
decompressed).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest
from confluent_kafka import Producer

from proxy.devtools.embedded_kafka import KafkaCluster
from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess
from tests.support.metrics import by_labels, moved, scrape, wait_for
from tests.support.native_herald import native_herald
from tests.support.native_parts import ENGINE, needs

pytestmark = needs(ENGINE)

CHAINS = {"fetch": [{"type": "drop_headers", "headers": ["x-debug", "prefix:x-tenant-"]}]}
HANDOVERS = "herald_native_relay_handovers_total"
COUNTERS = ("herald_interceptor_records_total", "herald_interceptor_batches_total",
            "herald_interceptor_headers_removed_total")
BATCHES, PER_BATCH = 40, 25


@pytest.fixture(scope="module")
def herald_for(kafka: KafkaCluster) -> Callable[[str], HeraldProcess]:
    return partial(native_herald, kafka, interceptors=CHAINS)


def _fill(bootstrap: str, topic: str, **conf: object) -> list[tuple[bytes, list]]:
    """Straight to the broker: BATCHES batches of PER_BATCH records; one record in every
    eighth batch carries headers the chain drops."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000,
                         "batch.num.messages": PER_BATCH, **conf})
    sent = []
    for b in range(BATCHES):
        for i in range(PER_BATCH):
            headers = [("app", f"{b}-{i}".encode())]
            if b % 8 == 3 and i == 7:
                headers += [("x-debug", b"internal"), ("x-tenant-red", b"secret")]
            value = f"value-{b}-{i}".encode() * (i % 5 + 1)
            producer.produce(topic, value, headers=headers)
            sent.append((value, headers))
        assert producer.flush(30) == 0  # one batch per flush
    return sent


@pytest.mark.parametrize("codec", ["none", "lz4", "zstd", "gzip", "snappy"])
def test_scanned_natively_as_in_python(kafka: KafkaCluster, herald_on: HeraldProcess,
                                       herald_off: HeraldProcess, topic_name: str,
                                       codec: str) -> None:
    create_topic(kafka.bootstrap, topic_name)
    sent = _fill(kafka.bootstrap, topic_name, **{"compression.type": codec})
    total = len(sent)
    expected = [(v, [h for h in hs if not h[0].startswith("x-")]) for v, hs in sent]
    counted = {}
    for proc in (herald_on, herald_off):
        before = scrape(proc)
        got = consume_all(proc.bootstrap, topic_name, total,
                          conf={"fetch.max.bytes": 4096, "message.max.bytes": 4096,
                                "max.partition.fetch.bytes": 4096})
        assert [(m.value(), list(m.headers() or [])) for m in got] == expected
        after = wait_for(proc, lambda s, b=before: moved(
            b, s, "herald_interceptor_records_total", outcome="seen") >= total)
        counted[proc is herald_on] = {name: by_labels(before, after, name)
                                      for name in COUNTERS}
        counted[proc is herald_on]["handovers"] = moved(before, after, HANDOVERS,
                                                        reason="response")
        if proc is herald_off and codec != "none":  # the batches were compressed indeed
            assert moved(before, after, "herald_compression_seconds_total", compression=codec,
                         operation="decompress") > 0
    on, off = counted[True], counted[False]
    handed = on.pop("handovers")
    assert off.pop("handovers") == 0
    assert on == off
    # Small fetches: many responses, only those with a dropped header went to Python.
    assert 0 < handed <= BATCHES // 8 + 2
    removed = sum(on["herald_interceptor_headers_removed_total"].values())
    assert removed == 2 * (BATCHES // 8)
