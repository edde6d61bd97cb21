"""What held and closed connections leave to Python's cyclic garbage collector.

Full passes of the collector walk every tracked object that is not frozen, with the event
loop stopped: a proxy whose held connections stayed in those passes stalled longer the more
it held. These tests guard both halves of the remedy (`proxy/serving/collector.py`), counting
objects, never time: a session that ends leaves no reference cycle (so reference counting
frees it, frozen or not), and the collector keeper takes held sessions out of the passes.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from proxy.config.proxy_yaml import parse_config
from proxy.devtools.embedded_kafka import KafkaCluster
from proxy.server import Proxy
from proxy.session.session import Session
from tests.support import raw_client as raw
from tests.support.clients import create_topic
from tests.support.herald_process import herald_config

REPO = Path(__file__).resolve().parents[4]
HERALD_PACKAGES = ("proxy.", "interceptors.", "protocol.")
TRACEPARENT = b"00-" + b"ab" * 16 + b"-" + b"cd" * 8 + b"-01"
CHAINS = {"produce": [{"type": "trace_context"}, {"type": "audit"}], "fetch": []}


def _herald_made(obj: object) -> bool:
    """An object of Herald's own types, or a coroutine or frame running Herald's code."""
    kind = type(obj)
    if kind.__module__.startswith(HERALD_PACKAGES):
        return True
    code = getattr(obj, "cr_code", None) or getattr(obj, "f_code", None)
    return code is not None and code.co_filename.startswith(str(REPO / "proxy"))


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """The keeper freezes this whole process while a proxy runs in it: give it all back."""
    yield
    gc.unfreeze()


async def _start(kafka: KafkaCluster, nursery: trio.Nursery, native: str) -> Proxy:
    proxy = Proxy(parse_config(herald_config(kafka.bootstrap, interceptors=CHAINS,
                                             performance={"native_relay": native})))
    nursery.start_soon(proxy.serve)
    await proxy.ready.wait()
    return proxy


async def _worked(address: str, topic: str, n: int) -> list[raw.TrioRawClient]:
    """`n` connections that each did what a client does first (ApiVersions, Metadata, a
    traced Produce) and are still open."""
    clients = []
    for _ in range(n):
        client = await raw.TrioRawClient.connect(address)
        for request in (raw.api_versions(1), raw.metadata(2, [topic]),
                        raw.produce(3, topic, [b"held"], headers=[("traceparent", TRACEPARENT)])):
            await client.send(request)
            assert await client.recv() is not None
        clients.append(client)
    return clients


async def _until_no_sessions(proxy: Proxy) -> None:
    with trio.fail_after(30):
        while proxy.sessions:
            await trio.sleep(0.05)


@pytest.mark.parametrize("native", ["auto", "off"])
async def test_a_session_that_ends_leaves_no_reference_cycle(
    kafka: KafkaCluster, nursery: trio.Nursery, topic_name: str, native: str, unfrozen: None
) -> None:
    create_topic(kafka.bootstrap, topic_name)
    proxy = await _start(kafka, nursery, native)
    address = str(proxy.config.listen.bootstrap)
    await _worked(address, topic_name, 3)  # what the first connections build once
    gc.collect()
    # From here every pass, the automatic collector's and the keeper's alike, keeps what it
    # finds unreachable in gc.garbage instead of freeing it: a cycle the sessions leave is
    # seen whichever pass meets it first.
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.garbage.clear()
    try:
        clients = await _worked(address, topic_name, 30)
        for client in clients:
            await client.aclose()
        del clients, client
        await _until_no_sessions(proxy)
        gc.unfreeze()
        gc.collect()
        left = Counter(type(o).__qualname__ for o in gc.garbage if _herald_made(o))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert proxy.connections.counts()[1] >= 33
    assert not left, f"closed sessions left cycles of: {dict(left)}"
    proxy.stop()


async def test_held_sessions_leave_the_full_passes(
    kafka: KafkaCluster, nursery: trio.Nursery, topic_name: str, unfrozen: None
) -> None:
    create_topic(kafka.bootstrap, topic_name)
    proxy = await _start(kafka, nursery, "auto")
    clients = await _worked(str(proxy.config.listen.bootstrap), topic_name, 40)
    assert len(proxy.sessions) == 40
    walked = [o for o in gc.get_objects() if isinstance(o, Session)]
    assert len(walked) >= 40  # before the keeper settles, full passes walk them all
    del walked
    proxy.collector.settle()
    walked = [o for o in gc.get_objects() if isinstance(o, Session)]
    assert walked == [], f"{len(walked)} held sessions are still walked by every full pass"
    assert len(proxy.sessions) == 40
    assert (proxy.metrics.registry.get_sample_value("herald_gc_settles_total") or 0) >= 1
    for client in clients:
        await client.aclose()
    await _until_no_sessions(proxy)
    proxy.stop()
