"""The interceptor chains as a filter-chain member: Produce requests in, Fetch responses out.

Only partitions of topics that some configured member applies to are split into batches; a
batch no member changed is forwarded as the bytes that arrived, and a request or response
in which nothing changed is forwarded whole, undecoded bytes and all.

A partition the produce chain rejects is taken out of the request, so nothing of it is
written, and put back into the broker's answer with the chain's error code. If every
partition is rejected, the request still goes to the broker with no partitions: its (empty)
answer arrives in order with the other responses of the connection, and the rejected
partitions are merged into it.

Observability costs little here: compressed batches are timed around their decompression
and, when changed, their re-encoding (two clock reads each, plain float additions); record
counters per topic are taken only for topics on the `admin.topic_labels` allowlist; the trace
contexts the produce chain wrote are handed on (in `Exchange.traces`) only when tracing is on.
"""

from __future__ import annotations

from dataclasses import dataclass
from time import perf_counter
from typing import Any

import trio

from interceptors import Chains, ConnectionInfo, PartitionOutcome
from interceptors.api import PRODUCE
from protocol.api_keys import ApiKey
from protocol.messages.produce_response import (
    BatchIndexAndErrorMessage,
    PartitionProduceResponse,
    TopicProduceResponse,
)
from protocol.records import join_batches, split_batches
from proxy.filters import Exchange, Filter, SessionContext
from proxy.metrics import CodecStats, TopicTally
from proxy.topic_ids import TopicIds

_BYTES = (bytes, bytearray, memoryview)

UNKNOWN_TOPIC_ID = 100  # retriable: clients refresh metadata and retry
_UNKNOWN_ID = PartitionOutcome(UNKNOWN_TOPIC_ID, "topic id not yet known to the proxy")

OFFLOAD_BYTES = 256 * 1024
"""Compressed partitions at least this large are (de)compressed in a worker thread."""


def _decompress(batches: list[Any]) -> dict[int, float]:
    """Decompress every compressed batch now; seconds spent per codec."""
    seconds: dict[int, float] = {}
    for b in batches:
        if not isinstance(b, _BYTES) and b.compression and b.record_count and not b.is_control:
            start = perf_counter()
            b.decompress()
            seconds[b.compression] = seconds.get(b.compression, 0.0) + perf_counter() - start
    return seconds


def _join(batches: list[Any]) -> tuple[bytes | None, list[int], dict[int, float]]:
    """The records field after the chain (None when no batch changed), the codecs of the
    re-encoded batches, and seconds spent re-encoding compressed ones per codec."""
    parts = batches
    reencoded: list[int] = []
    seconds: dict[int, float] = {}
    for i, b in enumerate(batches):
        if isinstance(b, _BYTES) or not b.modified:
            continue
        cid = b.compression
        reencoded.append(cid)
        if cid:
            start = perf_counter()
            data = b.to_bytes()
            seconds[cid] = seconds.get(cid, 0.0) + perf_counter() - start
            if parts is batches:
                parts = list(batches)
            parts[i] = data
    return (join_batches(parts) if reencoded else None), reencoded, seconds


@dataclass(slots=True)
class Rejected:
    name: str
    topic_id: bytes
    partition: int
    outcome: PartitionOutcome


def connection_info(ctx: SessionContext) -> ConnectionInfo:
    """The interceptors' view of a connection, rebuilt only when the client id or the
    principal (after SASL, or KIP-368 re-authentication) changes."""
    conn = ctx.attributes.get("conn")
    if conn is None or conn.client_id != ctx.client_id or conn.principal != ctx.principal:
        conn = ConnectionInfo(ctx.client_id, ctx.client_address, ctx.principal)
        ctx.attributes["conn"] = conn
    return conn


class InterceptorFilter(Filter):
    name = "interceptors"

    def __init__(
        self,
        chains: Chains,
        topics: TopicIds,
        codec: CodecStats | None = None,
        tally: TopicTally | None = None,
    ) -> None:
        self.chains = chains
        self.topics = topics
        self.codec = codec if codec is not None else CodecStats()
        self.tally = tally if tally is not None and tally.allowlist else None
        self.report_traces = False  # set by the proxy when tracing is on

    async def _run_partition(
        self, chain: Any, topic: str, index: int, records: Any, conn: ConnectionInfo
    ) -> tuple[PartitionOutcome | None, bytes | None]:
        """Run `chain` over one partition: (its outcome, the new records field or None).

        Decompression and re-compression of large partitions run in a worker thread, so the
        event loop keeps serving other connections meanwhile; the chain itself always runs
        on the loop (its members are not thread-safe).
        """
        batches = split_batches(records)
        offload = len(records) >= OFFLOAD_BYTES and any(
            not isinstance(b, _BYTES) and b.compression for b in batches
        )
        if offload:
            seconds = await trio.to_thread.run_sync(_decompress, batches)
        else:
            seconds = _decompress(batches)
        self._add_seconds(self.codec.decompress_seconds, seconds)
        tally = self.tally
        before = tally.before(chain.stats) if tally and topic in tally.allowlist else None
        if chain.path == PRODUCE:
            outcome = chain.process(topic, index, batches, conn, traces=self.report_traces)
        else:
            outcome = chain.process(topic, index, batches, conn)
        if before is not None:
            tally.after(chain.stats, topic, before)
        if outcome is not None and not outcome.ok:
            return outcome, None
        if offload:
            joined, reencoded, seconds = await trio.to_thread.run_sync(_join, batches)
        else:
            joined, reencoded, seconds = _join(batches)
        for cid in reencoded:
            self.codec.reencoded[cid] += 1
        self._add_seconds(self.codec.compress_seconds, seconds)
        return outcome, joined

    @staticmethod
    def _add_seconds(into: Any, seconds: dict[int, float]) -> None:
        for cid, value in seconds.items():
            into[cid] += value

    def wants_request(self, api_key: int, version: int) -> bool:
        return api_key == ApiKey.PRODUCE and len(self.chains.produce) > 0

    def wants_response(self, api_key: int, version: int) -> bool:
        return api_key == ApiKey.FETCH and len(self.chains.fetch) > 0

    def _topic(self, name: str, topic_id: bytes, version: int, by_id_from: int) -> str | None:
        return name if version < by_id_from else self.topics.name(topic_id)

    async def on_request(
        self, ctx: SessionContext, exchange: Exchange, api_key: int, version: int, msg: Any
    ) -> bool:
        chain = self.chains.produce
        conn = connection_info(ctx)
        changed = False
        rejected: list[Rejected] = []
        kept_topics = []
        for t in msg.topic_data:
            topic = self._topic(t.name, t.topic_id, version, 13)
            if topic is None:
                # A topic id no Metadata response has named yet: the chain cannot know whether
                # it applies, so nothing is written unchecked. The client refreshes its
                # metadata (through Herald, which learns the id) and retries.
                rejected.extend(Rejected(t.name, t.topic_id, p.index, _UNKNOWN_ID)
                                for p in t.partition_data)
                continue
            if not chain.applies(topic, conn):
                kept_topics.append(t)
                continue
            kept = []
            for p in t.partition_data:
                if p.records is None:
                    kept.append(p)
                    continue
                outcome, records = await self._run_partition(
                    chain, topic, p.index, p.records, conn
                )
                if not outcome.ok:
                    rejected.append(Rejected(t.name, t.topic_id, p.index, outcome))
                    continue
                if self.report_traces and outcome.traces:
                    if exchange.traces is None:
                        exchange.traces = {}
                    exchange.traces[(topic, p.index)] = outcome.traces
                if records is not None:
                    p.records = records
                    changed = True
                kept.append(p)
            if len(kept) != len(t.partition_data):
                t.partition_data = kept
            if kept:
                kept_topics.append(t)
        if rejected:
            msg.topic_data = kept_topics
            exchange.notes[self] = rejected
            changed = True
        return changed

    async def on_response(
        self, ctx: SessionContext, exchange: Exchange, api_key: int, version: int, msg: Any
    ) -> bool:
        if api_key == ApiKey.PRODUCE:
            return self._merge_rejections(exchange.notes.get(self, ()), version, msg)
        chain = self.chains.fetch
        conn = connection_info(ctx)
        changed = False
        for t in msg.responses:
            topic = self._topic(t.topic, t.topic_id, version, 13)
            if topic is None:
                # As on the produce path: records of an unnamed topic id are not handed out
                # unfiltered; the consumer refreshes its metadata and fetches again.
                for p in t.partitions:
                    if p.records:
                        p.records = b""
                        p.error_code = UNKNOWN_TOPIC_ID
                        changed = True
                continue
            if not chain.applies(topic, conn):
                continue
            for p in t.partitions:
                if not p.records:
                    continue
                _, records = await self._run_partition(
                    chain, topic, p.partition_index, p.records, conn
                )
                if records is not None:
                    p.records = records
                    changed = True
        return changed

    @staticmethod
    def _merge_rejections(rejected: list[Rejected], version: int, msg: Any) -> bool:
        return merge_answers(rejected, version, msg)


def merge_answers(answers: list[Rejected], version: int, msg: Any) -> bool:
    """Put the partitions Herald answered itself into the broker's Produce response (their
    topic entry is made when the broker saw none of the topic); True when there were any."""
    by_id = version >= 13
    topics = {(t.topic_id if by_id else t.name): t for t in msg.responses}
    for r in answers:
        key = r.topic_id if by_id else r.name
        entry = topics.get(key)
        if entry is None:
            entry = TopicProduceResponse(name=r.name, topic_id=r.topic_id)
            topics[key] = entry
            msg.responses.append(entry)
        entry.partition_responses.append(PartitionProduceResponse(
            index=r.partition,
            error_code=r.outcome.error_code,
            base_offset=-1,
            error_message=r.outcome.error_message if version >= 8 else None,
            record_errors=[
                BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                for i, m in r.outcome.record_errors
            ] if version >= 8 else [],
        ))
    return bool(answers)
