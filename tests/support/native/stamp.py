"""Produce requests stamped by the engine and by the Python chain from the same random draws
and clock, so the two outputs can be compared byte for byte."""

from __future__ import annotations

import random
import struct
from typing import Any

import crc32c
import trio

from interceptors import build_chains, ids
from interceptors.context import ProxyInfo
from protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from protocol.records import Record, build_batch, split_batches
from proxy.filters.chain import Exchange, FilterChain, SessionContext
from proxy.filters.interception import InterceptorFilter
from proxy.native.stamp_plan import stamp_plan
from proxy.net.wire import decode_request, encode_request, parse_request_header
from proxy.upstream.topic_ids import TopicIds
from tests.support.native_parts import native_module

_relay = native_module("proxy.native._relay")


NOW = 1_764_000_000_123


CLUSTER = "clu-ster-1"


INSTANCE = "herald-test-1"


def chains_for(trace: dict | None, audit: dict | None) -> tuple[Any, ProxyInfo]:
    env = ProxyInfo(instance_id=INSTANCE, cluster_id=CLUSTER, clock=lambda: NOW / 1000)
    spec = []
    if trace is not None:
        spec.append({"type": "trace_context", **trace})
    if audit is not None:
        spec.append({"type": "audit", **audit})
    return build_chains({"produce": spec}, env), env


def session(client_id: str | None = "app-1") -> SessionContext:
    return SessionContext("10.1.2.3:5555", "bootstrap", "127.0.0.1:9092", client_id=client_id)


def frame(version: int, msg: ProduceRequest, client_id: str | None = "app-1",
          corr: int = 7) -> bytes:
    cid = b"\xff\xff" if client_id is None else struct.pack(">h", len(client_id)) + \
        client_id.encode()
    head = struct.pack(">hhi", 0, version, corr) + cid + (b"\x00" if version >= 9 else b"")
    payload = head + msg.encode(version)
    return struct.pack(">i", len(payload)) + payload


STATES = (b"congo=t61rcWkgMzE,rojo=00f067aa0ba902b7", b"", b" a@b-c=1 ,, \tz=~ x")


def own_context(rng: random.Random) -> list[tuple[str, bytes]]:
    """A client's own valid trace context: a traceparent (now and then of a later version,
    which may go on after its flags) and zero to two valid tracestate headers."""
    version = rng.choice((b"00", b"00", b"01", b"fe"))
    tp = b"%s-%032x-%016x-%02x" % (version, rng.getrandbits(128) | 1, rng.getrandbits(64) | 1,
                                   rng.randrange(256))
    if version != b"00" and rng.random() < 0.5:
        tp += b"-future"
    return [("traceparent", tp)] + [("tracestate", rng.choice(STATES))
                                    for _ in range(rng.choice((0, 0, 1, 2)))]


def records(rng: random.Random, n: int, traced: float = 0.0) -> list[Record]:
    """`traced`: the share of records that carry their own trace context."""
    out = []
    for i in range(n):
        headers = [(f"h{j}", None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 9)))
                   for j in range(rng.choice((0, 0, 1, 3)))]
        if rng.random() < traced:
            for header in own_context(rng):
                headers.insert(rng.randrange(len(headers) + 1), header)
        key = None if rng.random() < 0.3 else rng.randbytes(rng.randrange(0, 20))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice((0, 5, 200, 3000)))
        out.append(Record(key, value, headers, offset_delta=i))
    return out


def request(rng: random.Random, topics: int = 2, partitions: int = 2, batches: int = 2,
            traced: float = 0.0) -> ProduceRequest:
    data = []
    for t in range(topics):
        parts = []
        for p in range(partitions):
            chunk = b"".join(
                build_batch(records(rng, rng.randrange(1, 40), traced),
                            producer_id=rng.choice((-1, 42)),
                            producer_epoch=1, base_sequence=rng.choice((-1, 100)),
                            is_transactional=rng.random() < 0.3, base_timestamp=NOW - 5)
                for _ in range(batches))
            parts.append(PartitionProduceData(index=p, records=chunk))
        parts.append(PartitionProduceData(index=partitions, records=None))
        data.append(TopicProduceData(name=f"topic-{t}", topic_id=topic_id(t),
                                     partition_data=parts))
    return ProduceRequest(transactional_id=rng.choice((None, "tx-1")), acks=-1,
                          timeout_ms=30_000, topic_data=data)


def topic_id(t: int) -> bytes:
    return bytes([t + 1]) * 16


def python_output(filt: InterceptorFilter, ctx: SessionContext, data: bytes) -> bytes:
    """What the Python path sends for the request frame."""
    payload = data[4:]
    head = parse_request_header(payload)
    ctx.client_id = head.client_id
    offset, msg = decode_request(head, payload)
    changed = trio.run(filt.on_request, ctx, Exchange(), 0, head.api_version, msg)
    if not changed:  # every record kept its own traceparent and nothing else was appended
        return data
    out = encode_request(head, payload, offset, msg)
    return struct.pack(">i", len(out)) + out


def draws_of(msg: ProduceRequest, seed: int, per_batch: bool, traces: bool, uuids: bool,
             keeps: bool = True) -> tuple[bytes, bytes]:
    """The random bytes the Python chain draws for `msg` after `ids.seed(seed)`, batch by
    batch in the layout the engine takes. With `keeps`, records that carry their own
    traceparent get no new one: in record mode they draw nothing, in batch mode a batch all of
    whose records carry one draws nothing."""
    ids.seed(seed)
    trace, message = bytearray(), bytearray()
    for t in msg.topic_data:
        for p in t.partition_data:
            for batch in split_batches(p.records or b""):
                n = batch.record_count
                fresh = n - sum(keeps and any(k == "traceparent" for k, _ in r.headers)
                                for r in batch.records)
                if traces and fresh:
                    bits = 192 if per_batch else 192 * fresh
                    trace += ids._trace_random.getrandbits(bits).to_bytes(bits // 8, "big")
                if uuids:
                    message += ids._message_random.getrandbits(96 * n).to_bytes(12 * n, "big")
    return bytes(trace), bytes(message)


def setup(trace: dict | None, audit: dict | None) -> tuple[InterceptorFilter, Any]:
    chains, _ = chains_for(trace, audit)
    topics = TopicIds()
    for t in range(4):
        topics.learn(topic_id(t), f"topic-{t}")
    filt = InterceptorFilter(chains, topics)
    plan = stamp_plan(FilterChain([filt]), session())
    assert plan is not None
    return filt, plan


def plan_of(filt: InterceptorFilter) -> Any:
    plan = stamp_plan(FilterChain([filt]), session())
    assert plan is not None
    return plan


def refused(data: bytes, plan: Any) -> str:
    out = _relay.stamp_produce(data, plan.wire, bytes(24 * 4096), bytes(12 * 4096), NOW)
    assert out[0] is None
    return out[1]


def one_partition(chunk: bytes, version: int = 9) -> bytes:
    return frame(version, ProduceRequest(acks=1, topic_data=[TopicProduceData(
        name="t", partition_data=[PartitionProduceData(index=0, records=chunk)])]))


def refused_not(data: bytes, plan: Any) -> bool:
    out = _relay.stamp_produce(data, plan.wire, bytes(24 * 4096), bytes(12 * 4096), NOW)
    return out[0] is not None


def mangled(rng: random.Random, base: bytes, head: int) -> bytes:
    """A frame made malformed one of three ways (its size prefix fixed up): cut short after
    `head` bytes or more, bits flipped, or a length field from `head` on made huge."""
    data = bytearray(base)
    how = rng.randrange(3)
    if how == 0:
        data = data[:rng.randrange(head, len(data))]
    elif how == 1:
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(4, len(data))] ^= 1 << rng.randrange(8)
    else:
        at = rng.randrange(head, len(data) - 4)
        data[at:at + 4] = b"\x7f\xff\xff\xf0"
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


def assert_batches_valid(data: bytes) -> None:
    payload = data[4:]
    head = parse_request_header(payload)
    _, msg = decode_request(head, payload)
    for t in msg.topic_data:
        for p in t.partition_data:
            pos = 0
            recs = bytes(p.records or b"")
            while pos < len(recs):
                size = 12 + struct.unpack_from(">i", recs, pos + 8)[0]
                crc = struct.unpack_from(">I", recs, pos + 17)[0]
                assert crc32c.crc32c(recs[pos + 21:pos + size]) == crc
                pos += size
