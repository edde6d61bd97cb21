"""Fetch responses scanned by the engine and by the Python chain, so their verdicts and what
they leave of each record can be compared."""

from __future__ import annotations

import random
import struct
from typing import Any

import trio

from interceptors import build_chains
from protocol.api_keys import ApiKey
from protocol.messages.fetch_response import (
    AbortedTransaction,
    FetchableTopicResponse,
    FetchResponse,
    PartitionData,
)
from protocol.records import Record, build_batch
from proxy.filters.chain import Exchange, FilterChain, SessionContext
from proxy.filters.interception import InterceptorFilter
from proxy.native import relay as native_relay
from proxy.native.fetch_plan import FetchPlan, fetch_plan
from proxy.net.wire import decode_response, encode_response
from proxy.upstream.topic_ids import TopicIds

_relay = native_relay._relay
FETCH, SHARE_FETCH = int(ApiKey.FETCH), int(ApiKey.SHARE_FETCH)


DROPPED = ["x-debug", "prefix:x-tenant-"]


def topic_id(t: int) -> bytes:
    return bytes([t + 1]) * 16


def setup(members: list[dict] | None = None) -> tuple[InterceptorFilter, FetchPlan]:
    spec = members if members is not None else [{"type": "drop_headers", "headers": DROPPED}]
    chains = build_chains({"fetch": spec})
    topics = TopicIds()
    for t in range(4):
        topics.learn(topic_id(t), f"topic-{t}")
    filt = InterceptorFilter(chains, topics)
    plan = fetch_plan(FilterChain([filt]))
    assert plan is not None
    return filt, plan


def session() -> SessionContext:
    return SessionContext("10.1.2.3:5555", "bootstrap", "127.0.0.1:9092", client_id="app-1")


def records(rng: random.Random, n: int, watched: float) -> list[Record]:
    out = []
    for i in range(n):
        headers = [(f"h{j}", None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 9)))
                   for j in range(rng.choice((0, 0, 1, 3)))]
        if rng.random() < watched:
            headers.insert(rng.randrange(len(headers) + 1),
                           (rng.choice(("x-debug", "x-tenant-blue")), b"secret"))
        elif rng.random() < 0.2:  # near misses: not dropped
            headers.append((rng.choice(("x-debu", "x-debugger", "x-tenant")), b"kept"))
        key = None if rng.random() < 0.3 else rng.randbytes(rng.randrange(0, 20))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice((0, 5, 200, 3000)))
        out.append(Record(key, value, headers, offset_delta=i))
    return out


def chunk(rng: random.Random, batches: int, watched: float, compression: int = 0,
          truncated: bool = False, control: bool = False) -> bytes:
    out = b""
    offset = 0
    for _ in range(batches):
        recs = records(rng, rng.randrange(1, 30), watched)
        out += build_batch(recs, base_offset=offset, compression=compression,
                           producer_id=rng.choice((-1, 42)), producer_epoch=1,
                           is_transactional=rng.random() < 0.3)
        offset += len(recs)
    if control:
        out += build_batch([Record(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")],
                           base_offset=offset, producer_id=42, producer_epoch=1,
                           is_transactional=True, is_control=True)
    if truncated:  # a Fetch response may end inside a batch
        more = build_batch(records(rng, 5, watched), base_offset=offset + 10)
        out += more[:rng.randrange(1, len(more) - 1)]
    return out


def response(rng: random.Random, version: int, topics: int, partitions: int, batches: int,
             watched: float, **kw: Any) -> FetchResponse:
    data = []
    for t in range(topics):
        parts = []
        for p in range(partitions):
            aborted = ([AbortedTransaction(producer_id=42, first_offset=rng.randrange(100))]
                       if rng.random() < 0.5 else None)
            parts.append(PartitionData(
                partition_index=p, high_watermark=1000, last_stable_offset=900,
                log_start_offset=0, aborted_transactions=aborted, preferred_read_replica=-1,
                records=chunk(rng, batches, watched, **kw)))
        parts.append(PartitionData(partition_index=partitions, records=None))
        data.append(FetchableTopicResponse(topic=f"topic-{t}", topic_id=topic_id(t),
                                           partitions=parts))
    return FetchResponse(throttle_time_ms=0, session_id=0, responses=data)


def frame(version: int, msg: Any, corr: int = 7, api: int = FETCH) -> bytes:
    """A response frame of `msg` (a Fetch response, or a ShareFetch one with `api`)."""
    flexible = api == SHARE_FETCH or version >= 12
    payload = struct.pack(">i", corr) + (b"\x00" if flexible else b"") + msg.encode(version)
    return struct.pack(">i", len(payload)) + payload


def python_unchanged(filt: InterceptorFilter, data: bytes, version: int, api: int = FETCH,
                     ctx: SessionContext | None = None) -> bool:
    """Does the Python path send the response frame out byte for byte as it came?"""
    payload = data[4:]
    offset, msg = decode_response(api, version, payload)
    changed = trio.run(filt.on_response, ctx or session(), Exchange(), api, version, msg)
    return not changed or encode_response(api, version, payload, offset, msg) == payload


def scan(data: bytes, version: int, plan: FetchPlan, check_tags: bool = False,
         api: int = FETCH) -> tuple:
    return _relay.scan_fetch(data, api, version, plan.wire, check_tags)


def scan_agrees_with_python(version: int, msg: FetchResponse) -> bool:
    """The engine's verdict on the response is the Python chain's, and what it counts when
    it passes the response is what the chain counted; True when it passed."""
    filt, plan = setup()
    data = frame(version, msg)
    got = scan(data, version, plan)
    before = filt.chains.fetch.stats.snapshot()
    unchanged = python_unchanged(filt, data, version)
    assert (got[0] is not None) == unchanged, got
    if got[0] is None:
        assert got[1] == "a record with a watched header"
        return False
    python = filt.chains.fetch.stats.snapshot()
    assert python != before
    filt2, plan2 = setup()
    plan2.count(*got)
    assert filt2.chains.fetch.stats.snapshot() == python
    assert python["batches_seen"] == got[0] and python["records_seen"] == got[1]
    return True
