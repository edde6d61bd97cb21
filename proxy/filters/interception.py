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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from time import perf_counter
from typing import Protocol, TypeVar

import trio
from prometheus_client import Counter

from interceptors import Chains, ChainStats, ConnectionInfo, PartitionOutcome
from interceptors.batch_fit import TooLarge, fit
from interceptors.chain import FetchChain, ProduceChain
from protocol.api_keys import ApiKey
from protocol.compression import DecompressedTooLarge
from protocol.contracts.features import TOPIC_ID_VERSION
from protocol.contracts.kafka_errors import MESSAGE_TOO_LARGE, UNKNOWN_TOPIC_ID
from protocol.errors import CodecError
from protocol.message import Message
from protocol.messages import (
    FetchResponse,
    ProduceRequest,
    ProduceResponse,
    ShareAcknowledgeRequest,
    ShareFetchRequest,
    ShareFetchResponse,
    share_acknowledge_request,
    share_fetch_request,
)
from protocol.primitives import Buffer
from protocol.records import RecordBatch, join_batches, split_batches
from proxy.filters import share_drops
from proxy.filters.chain import Exchange, Filter, NativeTakeover, SessionContext
from proxy.filters.offload import (
    BULK_FACTOR,
    OFFLOAD_BYTES,
    OFFLOAD_RECORDS,
    ON_LOOP_DECOMPRESSED,
)
from proxy.filters.produce_answers import Rejected, merge_answers
from proxy.filters.share_drops import ShareDrops
from proxy.limits.config import LimitsConfig
from proxy.limits.memory_budget import MemoryBudget
from proxy.limits.stats import (
    BATCH_DECOMPRESSED,
    BATCH_RECORDS,
    MEMORY,
    REQUEST_DECOMPRESSED,
    REQUEST_RECORDS,
    TOPIC_SIZE,
    LimitStats,
)
from proxy.observability.logs import get_logger
from proxy.observability.metrics import CodecStats, TopicTally
from proxy.upstream.topic_ids import TopicIds
from proxy.upstream.topic_limits import BROKER_DEFAULT_MAX_MESSAGE_BYTES, TopicLimits

log = get_logger("interception")

_BYTES = (bytes, bytearray, memoryview)

_Batches = list[RecordBatch | bytes]
"""A partition's records as `split_batches` cuts them: a batch, or bytes it cannot read."""
_Chain = ProduceChain | FetchChain
"""Either interceptor chain: the produce path's or the fetch path's (`_run_chain` tells)."""

_FETCHES = (ApiKey.FETCH, ApiKey.SHARE_FETCH)
# The requests that carry a share session's acknowledgements.
_SHARE_REQUESTS = (ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE)

# UNKNOWN_TOPIC_ID is retriable: clients refresh metadata and retry.
_UNKNOWN_ID = PartitionOutcome(UNKNOWN_TOPIC_ID, "topic id not yet known to the proxy")

class _Refused(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.outcome = PartitionOutcome(MESSAGE_TOO_LARGE, message)


@dataclass(slots=True)
class RequestAllowance:
    """What is left of one Produce request's record and decompressed-byte allowance."""

    records: int
    decompressed: int


def _decompress(batches: _Batches, per_batch: int, allowance: RequestAllowance | None,
                cap: int | None = None) -> dict[int, float]:
    """Decompress every compressed batch now, each bounded while it decompresses (by
    `per_batch`, what is left of the request's allowance, and `cap` for all of them);
    seconds per codec.

    Raises `DecompressedTooLarge` when `cap` was the bound that stopped it, `_Refused`
    when a limit was.
    """
    seconds: dict[int, float] = {}
    left = allowance.decompressed if allowance is not None else per_batch * len(batches)
    for b in batches:
        if isinstance(b, _BYTES) or b.is_control:
            continue
        if b.compression and b.record_count:
            bound = min(per_batch, left)
            b.max_decompressed = bound if cap is None else min(bound, cap)
            start = perf_counter()
            try:
                _, begin, end = b.records_section()
            except DecompressedTooLarge:
                if cap is not None and cap < bound:
                    raise
                if bound < per_batch:
                    raise _Refused(REQUEST_DECOMPRESSED, (
                        "the records of this Produce request decompress to more than "
                        "limits.max_request_decompressed_bytes")) from None
                raise _Refused(BATCH_DECOMPRESSED, (
                    "a record batch decompresses to more than "
                    f"limits.max_batch_decompressed_bytes ({per_batch} bytes)")) from None
            seconds[b.compression] = seconds.get(b.compression, 0.0) + perf_counter() - start
            left -= end - begin
            if cap is not None:
                cap -= end - begin
        else:
            left -= len(b)
    if allowance is not None:
        allowance.decompressed = left
    return seconds


def _count_records(batches: _Batches, per_batch: int, allowance: RequestAllowance) -> int:
    """Check record counts against the limits before anything is decompressed."""
    total = 0
    for b in batches:
        if isinstance(b, _BYTES):
            continue
        if b.record_count > per_batch:
            raise _Refused(BATCH_RECORDS, (
                f"a record batch of {b.record_count} records is over "
                f"limits.max_batch_records ({per_batch})"))
        total += b.record_count
    if total > allowance.records:
        raise _Refused(REQUEST_RECORDS, "the Produce request has more records than "
                       "limits.max_request_records")
    allowance.records -= total
    return total


@dataclass(slots=True)
class _Joined:
    records: bytes | None  # the new records field, None when no batch changed
    reencoded: list[int]  # codec ids of the re-encoded batches
    seconds: dict[int, float]  # compressing, per codec
    fitted: list[int]  # codec ids batches were re-encoded with to fit the topic's limit
    too_large: TooLarge | None = None


def _join(batches: _Batches, limit: int | None = None, version: int = 0) -> _Joined:
    """Re-encode the batches the chain changed; with a `limit` (the produce path), make each
    fit it as `batch_fit` does."""
    parts = batches
    out = _Joined(None, [], {}, [])
    seconds = out.seconds
    for i, b in enumerate(batches):
        if isinstance(b, _BYTES) or not b.modified:
            continue
        cid = b.compression
        out.reencoded.append(cid)
        if cid or limit is not None:
            start = perf_counter()
            data = b.to_bytes()
            if limit is not None:
                fitted = fit(b, data, limit, version)
                if isinstance(fitted, TooLarge):
                    out.too_large = fitted
                    return out
                data, codec = fitted
                if codec is not None:
                    out.fitted.append(codec)
            seconds[cid] = seconds.get(cid, 0.0) + perf_counter() - start
            if parts is batches:
                parts = list(batches)
            parts[i] = data
    if out.reencoded:
        out.records = join_batches(parts)
    return out


def connection_info(ctx: SessionContext) -> ConnectionInfo:
    """The interceptors' view of a connection, rebuilt only when the client id or the
    principal (after SASL, or KIP-368 re-authentication) changes."""
    conn = ctx.attributes.get("conn")
    if conn is None or conn.client_id != ctx.client_id or conn.principal != ctx.principal:
        conn = ConnectionInfo(ctx.client_id, ctx.client_address, ctx.principal)
        ctx.attributes["conn"] = conn
    return conn


class _Fetched(Protocol):
    """A partition of a Fetch or ShareFetch response, as far as withholding its records goes."""

    records: bytes | bytearray | memoryview | None
    error_code: int


_P = TypeVar("_P", bound=_Fetched)


def _withhold(partitions: Iterable[_P]) -> list[_P]:
    """Records of an unnamed topic id are not handed out unfiltered, as on the produce path:
    each partition with records gets none and UNKNOWN_TOPIC_ID, so the consumer refreshes its
    metadata and fetches again. The partitions changed."""
    withheld = []
    for p in partitions:
        if p.records:
            p.records = b""
            p.error_code = UNKNOWN_TOPIC_ID
            withheld.append(p)
    return withheld


class _EngineWork:
    """The interceptor filter as the native engine sees it (`NativeWork`): what its plans
    need, read from the filter as it is now."""

    __slots__ = ("_filter",)

    def __init__(self, filt: InterceptorFilter) -> None:
        self._filter = filt

    @property
    def chains(self) -> Chains:
        return self._filter.chains

    @property
    def reports_spans(self) -> bool:
        return self._filter.report_traces

    @property
    def counts_topics(self) -> bool:
        return self._filter.tally is not None

    def connection(self, ctx: SessionContext) -> ConnectionInfo:
        return connection_info(ctx)

    def topic_names(self) -> Mapping[bytes, str]:
        return self._filter.topics.names

    def record_limits(self) -> tuple[int, int]:
        limits = self._filter.limits
        return limits.max_batch_records, limits.max_request_records

    def batch_limit(self) -> int:
        """Above the smallest topic size limit known, Python decides how a batch fits its
        topic."""
        topic_limits = self._filter.topic_limits
        if topic_limits is None:
            return -1
        return min((BROKER_DEFAULT_MAX_MESSAGE_BYTES, *topic_limits.known.values()))

    def decompression_limits(self) -> tuple[int, int]:
        """Python's limits (`limits.max_batch_decompressed_bytes`,
        `max_request_decompressed_bytes`), and no more than the share of the memory budget
        Python lets one large partition's decompression book (`big_batch_booking`), so that
        whatever the engine decompresses Python would have decompressed too; past
        them the frame goes to Python, which refuses it with the limit's own error. A batch
        is also kept to what Python decompresses on its event loop without booking it
        (`ON_LOOP_DECOMPRESSED`): the engine holds one batch at a time, decompressed and
        stamped, outside the memory budget, and a larger one goes to Python, which books it
        and works in a worker thread."""
        filt = self._filter
        limits = filt.limits
        batch = limits.max_batch_decompressed_bytes
        request = limits.max_request_decompressed_bytes
        booking = filt.big_batch_booking()
        if booking is not None:
            _, share = booking
            batch, request = min(batch, share), min(request, share)
        return min(batch, ON_LOOP_DECOMPRESSED), request

    def count_reencoded(self, codec: int, batches: int) -> None:
        self._filter.codec.reencoded[codec] += batches


class InterceptorFilter(Filter):
    name = "interceptors"

    def __init__(
        self,
        chains: Chains,
        topics: TopicIds,
        codec: CodecStats | None = None,
        tally: TopicTally | None = None,
        limits: LimitsConfig | None = None,
        topic_limits: TopicLimits | None = None,
        limit_stats: LimitStats | None = None,
        memory: MemoryBudget | None = None,
        report_traces: bool = False,
        share: ShareDrops | None = None,
    ) -> None:
        """`memory`: the budget big batches are decoded within (None: no budget);
        `report_traces`: hand on the trace contexts the produce chain wrote (tracing is on);
        `share`: counts the share-group records the fetch chain drops, and any the broker
        hands out again (None: counted nowhere; dropped records are settled either way)."""
        self.chains = chains
        self.share = share if share is not None else ShareDrops(
            Counter("share_dropped", "", registry=None),
            Counter("share_redelivered", "", registry=None))
        self.topics = topics
        # The engine stamps the Produce requests and scans the Fetch responses this member
        # reads, when the plans built from what it gives allow (proxy/native/stamp_plan.py).
        self.native = NativeTakeover(stamp=True, scan=True, work=_EngineWork(self))
        self.codec = codec if codec is not None else CodecStats()
        self.tally = tally if tally is not None and tally.allowlist else None
        self.report_traces = report_traces
        self.limits = limits if limits is not None else LimitsConfig()
        self.topic_limits = topic_limits
        self.limit_stats = limit_stats if limit_stats is not None else LimitStats()
        self._big_work = trio.CapacityLimiter(self.limits.big_batch_workers)
        self.memory = memory
        # Chain runs overlap freely (on the loop and in worker threads), except runs of
        # chains with a member that is not `concurrent` (a plugin written for one run at a
        # time): those take this lock, on the loop as in a worker.
        self._serial = trio.Lock()

    def allowance(self) -> RequestAllowance:
        limits = self.limits
        return RequestAllowance(limits.max_request_records, limits.max_request_decompressed_bytes)

    async def _run_partition(
        self, chain: _Chain, topic: str, index: int, records: Buffer,
        conn: ConnectionInfo, allowance: RequestAllowance | None = None, version: int = 0,
    ) -> tuple[PartitionOutcome | None, bytes | None]:
        """Run `chain` over one partition: (its outcome, the new records field or None).

        `allowance` is given on the produce path: the limits on records and decompressed
        bytes are checked (record counts before decompressing, sizes while decompressing),
        and changed batches are made to fit the topic's size limit. Large partitions are
        processed in a worker thread, at most `limits.big_batch_workers` at a time, so the
        event loop keeps serving other connections meanwhile.
        """
        limits = self.limits
        per_batch = limits.max_batch_decompressed_bytes
        batches = split_batches(records, max_decompressed=per_batch)
        try:
            count = _count_records(batches, limits.max_batch_records, allowance) \
                if allowance is not None else \
                sum(b.record_count for b in batches if not isinstance(b, _BYTES))
            scale = BULK_FACTOR if chain.bulk(topic, conn) else 1
            big = len(records) >= OFFLOAD_BYTES * scale or count >= OFFLOAD_RECORDS
            if not big:
                try:
                    seconds = _decompress(batches, per_batch, allowance, ON_LOOP_DECOMPRESSED)
                except DecompressedTooLarge:
                    big = True
            if big:
                async with self._big_work:
                    self.limit_stats.offloaded += 1
                    return await self._run_big(chain, topic, index, batches, conn, allowance,
                                               version)
        except _Refused as refused:
            if allowance is None:
                # The fetch path: records that cannot be run through the chain are not
                # handed out unfiltered.
                raise CodecError(f"fetched records refused: {refused}") from None
            self.limit_stats.refused[refused.reason] += 1
            log.warning("partition_refused", topic=topic, partition=index,
                        limit=refused.reason, error=str(refused))
            return refused.outcome, None
        self._add_seconds(self.codec.decompress_seconds, seconds)
        outcome = await self._run_chain_async(chain, topic, index, batches, conn, False)
        if outcome is not None and not outcome.ok:
            return outcome, None
        return self._finish(topic, outcome, _join(batches, *self._fit_to(topic, allowance,
                                                                          version)))

    def big_batch_booking(self) -> tuple[MemoryBudget, int] | None:
        """The budget one large partition's decompression is booked in, and the most of it
        that one books: half the budget, split between the workers that may decompress at once
        (None: no budget, nothing booked and no share to keep to). Python books it
        (`_run_big`), and the engine decompresses no more than it (`decompression_limits`), so
        the two never disagree on what is too big."""
        memory = self.memory
        if memory is None:
            return None
        return memory, memory.limit // (2 * self.limits.big_batch_workers)

    async def _run_big(
        self, chain: _Chain, topic: str, index: int, batches: _Batches, conn: ConnectionInfo,
        allowance: RequestAllowance | None, version: int,
    ) -> tuple[PartitionOutcome | None, bytes | None]:
        per_batch = self.limits.max_batch_decompressed_bytes
        held = None
        cap = None
        booking = self.big_batch_booking()
        if booking is not None:
            memory, share = booking
            # The decompressed records are booked in the memory budget before they exist:
            # as much as the limits allow, at most the share.
            compressed = sum(1 for b in batches if not isinstance(b, _BYTES) and b.compression)
            cap = min(per_batch * compressed,
                      allowance.decompressed if allowance is not None else per_batch * compressed,
                      share)
            held = memory.holder()
            await held.take(cap)
        try:
            return await self._run_big_held(chain, topic, index, batches, conn, allowance,
                                            version, cap)
        finally:
            if held is not None:
                held.release()

    async def _run_big_held(
        self, chain: _Chain, topic: str, index: int, batches: _Batches, conn: ConnectionInfo,
        allowance: RequestAllowance | None, version: int, cap: int | None,
    ) -> tuple[PartitionOutcome | None, bytes | None]:
        per_batch = self.limits.max_batch_decompressed_bytes
        try:
            seconds = await trio.to_thread.run_sync(
                _decompress, batches, per_batch, allowance, cap)
        except DecompressedTooLarge:
            raise _Refused(MEMORY, "the records of this Produce request decompress to more "
                           "than the share of limits.memory_budget_bytes a batch may use"
                           ) from None
        self._add_seconds(self.codec.decompress_seconds, seconds)
        outcome = await self._run_chain_async(chain, topic, index, batches, conn, True)
        if outcome is not None and not outcome.ok:
            return outcome, None
        joined = await trio.to_thread.run_sync(
            _join, batches, *self._fit_to(topic, allowance, version))
        return self._finish(topic, outcome, joined)

    def _fit_to(self, topic: str, allowance: RequestAllowance | None, version: int
                ) -> tuple[int | None, int]:
        """(size limit, Produce version) for `_join`: a limit only on the produce path."""
        if allowance is None or self.topic_limits is None:
            return None, version
        return self.topic_limits.limit(topic), version

    def _run_chain(self, chain: _Chain, topic: str, index: int, batches: _Batches,
                   conn: ConnectionInfo, runs: list[ChainStats] | None = None
                   ) -> PartitionOutcome | None:
        """Run the chain over one partition (on the loop or in a worker thread); the run's
        own counters are added to `runs`, if given."""
        counts = runs.append if runs is not None else None
        if isinstance(chain, ProduceChain):
            return chain.process(topic, index, batches, conn, traces=self.report_traces,
                                 counts=counts)
        chain.process(topic, index, batches, conn, counts=counts)
        return None

    async def _run_chain_async(self, chain: _Chain, topic: str, index: int, batches: _Batches,
                               conn: ConnectionInfo, in_worker: bool
                               ) -> PartitionOutcome | None:
        """`_run_chain` on the loop or in a worker thread, serialised only when the chain
        says so; counters of an allowlisted topic are booked to it here, on the loop."""
        runs: list[ChainStats] | None = (
            [] if self.tally is not None and topic in self.tally.allowlist else None)
        serial = self._serial if chain.serial(topic, conn) else None
        if serial is not None:
            await serial.acquire()
        try:
            if in_worker:
                outcome = await trio.to_thread.run_sync(
                    self._run_chain, chain, topic, index, batches, conn, runs)
            else:
                outcome = self._run_chain(chain, topic, index, batches, conn, runs)
        finally:
            if serial is not None:
                serial.release()
        for run in runs or ():
            self.tally.after(run, topic, {})  # type: ignore[union-attr]
        return outcome

    def _finish(self, topic: str, outcome: PartitionOutcome | None, joined: _Joined
                ) -> tuple[PartitionOutcome | None, bytes | None]:
        if joined.too_large is not None:
            self.limit_stats.refused[TOPIC_SIZE] += 1
            message = joined.too_large.message(topic)
            log.warning("batch_too_large", topic=topic, limit=joined.too_large.limit,
                        before=joined.too_large.before, after=joined.too_large.after,
                        best=joined.too_large.best)
            return PartitionOutcome(MESSAGE_TOO_LARGE, message), None
        for cid in joined.reencoded:
            self.codec.reencoded[cid] += 1
        for cid in joined.fitted:
            self.limit_stats.fitted[cid] += 1
        self._add_seconds(self.codec.compress_seconds, joined.seconds)
        return outcome, joined.records

    @staticmethod
    def _add_seconds(into: list[float], seconds: dict[int, float]) -> None:
        for cid, value in seconds.items():
            into[cid] += value

    def wants_request(self, api_key: int, version: int) -> bool:
        if api_key in _SHARE_REQUESTS:  # to carry the gaps of records the chain dropped
            return len(self.chains.fetch) > 0
        return api_key == ApiKey.PRODUCE and len(self.chains.produce) > 0

    def wants_response(self, api_key: int, version: int) -> bool:
        # Share groups' ShareFetch responses carry records as Fetch responses do: what the
        # chain enforces holds for every consumer, a queue's as a classic group's.
        return api_key in _FETCHES and len(self.chains.fetch) > 0

    def owes(self, ctx: SessionContext) -> bool:
        # The gaps of share-group records the chain dropped, for the next ShareFetch or
        # ShareAcknowledge request to carry (the engine's scan passes only responses the chain
        # leaves unchanged, so only Python's runs of the chain add to them).
        return share_drops.owed(ctx.attributes)

    def _topic(self, name: str, topic_id: bytes, version: int, by_id_from: int) -> str | None:
        return name if version < by_id_from else self.topics.name(topic_id)

    async def on_request(
        self, ctx: SessionContext, exchange: Exchange, api_key: int, version: int, msg: Message
    ) -> bool:
        if not isinstance(msg, ProduceRequest):
            # Herald's acknowledgements go in as batches of the class the request's own are.
            gaps = share_drops.pending(ctx.attributes)
            if isinstance(msg, ShareFetchRequest):
                carried = share_drops.carry(msg, gaps, share_fetch_request.AcknowledgementBatch)
            else:
                assert isinstance(msg, ShareAcknowledgeRequest), "wants_request asks for no other"
                carried = share_drops.carry(
                    msg, gaps, share_acknowledge_request.AcknowledgementBatch)
            return carried > 0
        chain = self.chains.produce
        conn = connection_info(ctx)
        allowance = self.allowance()
        changed = False
        rejected: list[Rejected] = []
        kept_topics = []
        for t in msg.topic_data:
            topic = self._topic(t.name, t.topic_id, version, TOPIC_ID_VERSION)
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
                    chain, topic, p.index, p.records, conn, allowance, version
                )
                assert outcome is not None  # the produce chain always gives one
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
        self, ctx: SessionContext, exchange: Exchange, api_key: int, version: int, msg: Message
    ) -> bool:
        if isinstance(msg, FetchResponse):
            return await self._fetched(ctx, version, msg)
        if isinstance(msg, ShareFetchResponse):
            return await self._share_fetched(ctx, msg)
        # Read for the note its request left (the partitions the chain refused).
        assert isinstance(msg, ProduceResponse), "wants_response asks for no other"
        return self._merge_rejections(exchange.notes.get(self, ()), version, msg)

    async def _fetched(self, ctx: SessionContext, version: int, msg: FetchResponse) -> bool:
        chain = self.chains.fetch
        conn = connection_info(ctx)
        changed = False
        for t in msg.responses:
            topic = self._topic(t.topic, t.topic_id, version, TOPIC_ID_VERSION)
            if topic is None:
                changed |= bool(_withhold(t.partitions))
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

    async def _share_fetched(self, ctx: SessionContext, msg: ShareFetchResponse) -> bool:
        """As `_fetched`, and the acquired records the chain drops are settled by Herald (see
        share_drops): a share group's records are the same to the chain, but its partitions
        are a class of their own, with acquired ranges the consumer acknowledges."""
        chain = self.chains.fetch
        conn = connection_info(ctx)
        changed = False
        for t in msg.responses:
            topic = self.topics.name(t.topic_id)  # by id in every version of ShareFetch
            if topic is None:
                # The acquired records go too, or the consumer would acknowledge them as
                # gaps: unacknowledged, the broker hands them out again once their lock ends.
                for p in _withhold(t.partitions):
                    p.acquired_records = []
                    changed = True
                continue
            if not chain.applies(topic, conn):
                continue
            for p in t.partitions:
                if not p.records:
                    continue
                before = p.records
                _, records = await self._run_partition(
                    chain, topic, p.partition_index, before, conn
                )
                gone = self.share.dropped(t.topic_id, p.partition_index,
                                          p.acquired_records, bytes(before), records)
                if gone:  # settled by Herald, unseen by the consumer
                    p.acquired_records = share_drops.without(p.acquired_records, gone)
                    share_drops.pending(ctx.attributes).add(t.topic_id, p.partition_index,
                                                            gone)
                if records is not None:
                    p.records = records
                    changed = True
        return changed

    @staticmethod
    def _merge_rejections(rejected: list[Rejected], version: int, msg: ProduceResponse) -> bool:
        return merge_answers(rejected, version, msg)
