"""Routing on the produce path: a filter-chain member after the interceptor chains.

Per record, in config order, the first live rule that matches decides (shadow rules are
counted and passed over), and its action (`proxy.routing.actions`) says what becomes of the
record by calling back the batch's plan (`_BatchPlan`: route, or refuse). A partition no rule
touches is forwarded as the bytes that arrived. Otherwise:

* records that move are handed to the destination's producer, in record order, and removed
  from the batch, which is re-encoded with the records that stay (renumbered, and for
  idempotent producers under the rewritten sequence of `sequences.SequenceMap`);
* mirrored records are copied to their destination and stay;
* a partition with a record that a `reject` rule matches is refused whole, nothing written;
* a transactional batch that would lose or copy records is refused whole: the copies could
  not be part of the transaction, and a silent partial commit is the one outcome not allowed.

Every routed record gets Herald's sealed origin mark (`origin.py`) as its last header, and
move and mirror rules pass over a record that arrived with a mark the seal verifies, judged on
the record as it reached Herald, before the chains (`arrival.py`).

The client's response waits for every destination (`on_response`); a destination that failed
turns the partition's answer into REQUEST_TIMED_OUT, which every client retries. With acks=0
nothing waits: the records are sent once, best effort, and counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import trio
from opentelemetry.trace import Span

from interceptors import PartitionOutcome
from protocol.api_keys import ApiKey
from protocol.contracts.features import PRODUCE_RECORD_ERRORS_VERSION, TOPIC_ID_VERSION
from protocol.contracts.headers import ROUTE_ORIGIN as ORIGIN_HEADER
from protocol.contracts.kafka_errors import (
    DUPLICATE_SEQUENCE_NUMBER,
    INVALID_RECORD,
    NONE,
    REQUEST_TIMED_OUT,
    UNKNOWN_PRODUCER_ID,
)
from protocol.message import Message
from protocol.messages import ProduceRequest, ProduceResponse
from protocol.primitives import Buffer
from protocol.records import (
    Record,
    RecordBatch,
    build_batch,
    join_batches,
    split_batches,
    with_base_sequence,
)
from proxy.filters.chain import NATIVE_NOTHING, Exchange, Filter, SessionContext
from proxy.filters.offload import OFFLOAD_BYTES
from proxy.filters.produce_answers import Rejected, merge_answers
from proxy.observability.logs import get_logger
from proxy.observability.tracing import Tracing
from proxy.routing.actions.api import Rule
from proxy.routing.arrival import Arrivals, BatchArrival, PartitionArrival, arrived_key
from proxy.routing.destinations import Delivery, Destination
from proxy.routing.remembered import WAITING, RememberedSequences
from proxy.routing.rules import (
    KEY,
    PRIMARY,
    SAME,
    STAY,
    RoutingTable,
)
from proxy.routing.sequences import Attempt, Key, SequenceMap
from proxy.routing.spans import end_span, start_span
from proxy.routing.stats import (
    BEST_EFFORT,
    DELIVERED,
    DUPLICATE,
    FAILED,
    REFUSED,
    REJECTED,
    SHADOW,
    RoutingStats,
)
from proxy.upstream.topic_ids import TopicIds

log = get_logger("routing")

# INVALID_RECORD is not retriable: the client's application sees the message.
# UNKNOWN_PRODUCER_ID: idempotent producers bump their epoch and send the batch again.
# REQUEST_TIMED_OUT is retriable: every client retries it.


@dataclass(slots=True)
class Routed:
    """The records of one batch sent to one destination for one rule."""

    rule: Rule
    cluster: str
    indexes: list[int]
    delivery: Delivery | None = None


@dataclass(slots=True)
class Plan:
    """Which records of a batch leave it, and where; reused when the client retries."""

    routed: list[Routed] = field(default_factory=list)
    moved: frozenset[int] = frozenset()


@dataclass(slots=True)
class Waiting:
    name: str
    topic_id: bytes
    partition: int
    plans: list[Plan]
    answer_ok: bool  # True: the broker saw nothing of it, Herald answers success itself


@dataclass(slots=True)
class Note:
    waiting: list[Waiting] = field(default_factory=list)
    answers: list[Rejected] = field(default_factory=list)


class _Refuse(Exception):
    def __init__(self, outcome: PartitionOutcome) -> None:
        self.outcome = outcome


class _BatchPlan:
    """Where the records of one batch go, as the actions of the rules that decide them say
    (`actions.api.Planner`)."""

    __slots__ = ("stats", "records", "by_rule", "moved")

    def __init__(self, stats: RoutingStats, records: int) -> None:
        self.stats = stats
        self.records = records
        self.by_rule: dict[int, Routed] = {}
        self.moved: set[int] = set()

    def route(self, rule: Rule, index: int, keep: bool) -> None:
        routed = self.by_rule.get(rule.index)
        if routed is None:
            assert rule.target is not None
            routed = self.by_rule[rule.index] = Routed(rule, rule.target.cluster, [])
        routed.indexes.append(index)
        if not keep:
            self.moved.add(index)

    def refuse(self, rule: Rule, message: str) -> NoReturn:
        self.stats.count(rule.name, rule.action, "", REJECTED, self.records)
        raise _Refuse(PartitionOutcome(INVALID_RECORD, message))


class RoutingFilter(Filter):
    name = "routing"
    # The engine takes over nothing this member reads: routing rewrites Produce requests in
    # Python.
    native = NATIVE_NOTHING

    def __init__(self, table: RoutingTable, topics: TopicIds,
                 destinations: dict[str, Destination], stats: RoutingStats,
                 origin: Callable[[], bytes] = PRIMARY.encode, tracing: Tracing | None = None,
                 journal: Path | None = None,
                 cluster_id: Callable[[], str | None] = lambda: None) -> None:
        """`tracing`: observability.tracing.Tracing when on, and then a span per batch.
        `journal`: the file the sequence map is kept in (None: memory only); it is opened
        once `cluster_id()` (the primary's) is known."""
        self.table = table
        self.topics = topics
        self.destinations = destinations
        self.stats = stats
        self.sequences = SequenceMap()
        self.remembered = RememberedSequences(self.sequences, journal, stats)
        self.cluster_id = cluster_id
        self.origin = origin  # the primary cluster's id once known, recorded on routed records
        self.tracing = tracing  # dropped at the first span that fails (see `_span`)
        # The member to place before the interceptor chains: the records as they arrived,
        # on which the origin mark is checked (see arrival.py).
        self.arrivals = Arrivals(self)

    def wants_request(self, api_key: int, version: int) -> bool:
        return api_key == ApiKey.PRODUCE and bool(self.table.rules)

    async def on_request(
        self, ctx: SessionContext, exchange: Exchange, api_key: int, version: int, msg: Message
    ) -> bool:
        assert isinstance(msg, ProduceRequest), "wants_request asks for no other"
        table = self.table
        arrived = self.arrivals.take(exchange)
        if self.remembered.state == WAITING:
            self.remembered.open(self.cluster_id())
        note = Note()
        changed = False
        kept_topics = []
        for t in msg.topic_data:
            topic = t.name if version < TOPIC_ID_VERSION else self.topics.name(t.topic_id)
            if not topic or not (candidates := table.candidates(topic, ctx.client_id)):
                kept_topics.append(t)
                continue
            kept = []
            for p in t.partition_data:
                if p.records is None:
                    kept.append(p)
                    continue
                try:
                    records, plans, waits = await self._partition(
                        topic, p.index, p.records, candidates, msg.acks,
                        arrived.get(arrived_key(t, p.index)) if arrived else None,
                    )
                except _Refuse as refused:
                    note.answers.append(Rejected(t.name, t.topic_id, p.index, refused.outcome))
                    changed = True
                    continue
                if waits and msg.acks != 0:
                    note.waiting.append(Waiting(t.name, t.topic_id, p.index, plans,
                                                records == b""))
                if records == b"":  # every record left: the broker gets nothing of it
                    changed = True
                    continue
                if records is not None:
                    p.records = records
                    changed = True
                kept.append(p)
            if len(kept) != len(t.partition_data):
                t.partition_data = kept
            if kept:
                kept_topics.append(t)
        if changed:
            msg.topic_data = kept_topics
        if note.waiting or note.answers:
            exchange.notes[self] = note
        return changed

    async def _partition(
        self, topic: str, index: int, records: Buffer, candidates: tuple[Rule, ...],
        acks: int, arrived: Buffer | None = None,
    ) -> tuple[bytes | None, list[Plan], bool]:
        """(the new records field: None unchanged, b"" nothing left; the plans; whether any
        delivery must be waited for). `arrived`: the records field as it reached Herald,
        before the chains (None: as `records`), on which origin marks are checked."""
        batches = split_batches(records)
        arrival = PartitionArrival(self.table.seal,
                                   None if arrived is None or arrived is records else arrived)
        if len(records) >= OFFLOAD_BYTES:
            # As in the interceptor filter: large compressed partitions are decompressed in a
            # worker thread, so the loop keeps serving other connections meanwhile.
            await trio.to_thread.run_sync(_decompress_all, batches, arrival)
        plans: list[Plan] = []
        changed = False
        waits = False
        for i, b in enumerate(batches):
            if not isinstance(b, RecordBatch) or b.is_control or not b.record_count:
                continue
            if b.compression:
                b.decompress()
            tracked = b.producer_id >= 0  # idempotent or transactional: sequences checked
            seq_key = (b.producer_id, topic, index)
            attempt = None
            if tracked:
                attempt = self.sequences.retry(seq_key, b.producer_epoch, b.base_sequence,
                                               b.record_count)
                if attempt is None and self.sequences.is_stale(
                        seq_key, b.producer_epoch, b.base_sequence):
                    raise _Refuse(PartitionOutcome(DUPLICATE_SEQUENCE_NUMBER,
                                                    "duplicate of an earlier batch"))
                if attempt is None and not b.is_transactional and not self.sequences.knows(
                        seq_key, b.producer_epoch, b.base_sequence):
                    log.info("routing_sequence_unknown", producer_id=b.producer_id,
                             epoch=b.producer_epoch, topic=topic, partition=index,
                             base_sequence=b.base_sequence)
                    raise _Refuse(PartitionOutcome(UNKNOWN_PRODUCER_ID, SEQUENCE_UNKNOWN))
            if attempt is None:
                plan = self._new_plan(b, candidates, arrival.batch(i, b))
                if tracked:
                    # Booked (and journaled) before anything of the batch leaves Herald. A
                    # refused batch reaches the broker with nothing: later batches are
                    # renumbered as if its records had left, so the next one is in sequence.
                    kept = 0 if isinstance(plan, _Refuse) else b.record_count - len(plan.moved)
                    attempt = self.sequences.record(seq_key, b.producer_epoch, b.base_sequence,
                                                    b.record_count, kept, plan)
                    self.remembered.attempt(seq_key, b.producer_epoch, attempt)
            elif attempt.plan is None:  # restored from the journal: made again, and checked
                plan = attempt.plan = self._replan(b, candidates, arrival.batch(i, b), attempt,
                                                   seq_key)
            else:
                plan = attempt.plan
            if isinstance(plan, _Refuse):
                raise plan  # a retry of a refused batch is refused again
            if plan.routed:
                waits |= self._send(topic, index, b, plan, acks,
                                    (seq_key, b.producer_epoch, attempt) if attempt else None)
            if tracked:
                assert attempt is not None
                if plan.moved or attempt.upstream_base != b.base_sequence:
                    batches[i] = _kept_batch(b, plan.moved, attempt)
                    changed = True
            elif plan.moved:
                batches[i] = _kept_batch(b, plan.moved, None)
                changed = True
            if plan.routed:
                plans.append(plan)
        if not changed:
            return None, plans, waits
        return join_batches(batches), plans, waits

    def _new_plan(self, b: RecordBatch, candidates: tuple[Rule, ...],
                  provenance: BatchArrival) -> Plan | _Refuse:
        """The batch's plan, or the refusal it gets (counted)."""
        try:
            plan = self._plan(b, candidates, provenance)
        except _Refuse as refused:
            return refused
        if plan.routed and b.is_transactional:
            self._count_plan(plan, REFUSED)
            return _Refuse(PartitionOutcome(
                INVALID_RECORD,
                f"routing rule {plan.routed[0].rule.name!r} would send records of a "
                "transactional producer elsewhere; Herald refuses this so that no transaction "
                "commits in part",
            ))
        return plan

    def _replan(self, b: RecordBatch, candidates: tuple[Rule, ...], provenance: BatchArrival,
                attempt: Attempt, seq_key: tuple[int, str, int]) -> Plan | _Refuse:
        """The plan of a batch the journal remembers, made again from the retried batch. It
        must keep as many records as the first attempt did, or the upstream sequences the
        journal holds do not fit it: then the batch is refused as one whose shift is unknown.
        Rules whose delivery was journaled are not routed again."""
        plan = self._new_plan(b, candidates, provenance)
        kept = 0 if isinstance(plan, _Refuse) else b.record_count - len(plan.moved)
        if kept != attempt.kept:
            log.warning("routing_journal_mismatch", producer_id=b.producer_id,
                        epoch=b.producer_epoch, topic=seq_key[1], partition=seq_key[2],
                        base_sequence=b.base_sequence, kept=kept, journaled=attempt.kept,
                        note="the rules decide differently than before the restart")
            return _Refuse(PartitionOutcome(UNKNOWN_PRODUCER_ID, SEQUENCE_UNKNOWN))
        if isinstance(plan, Plan):
            token = trio.lowlevel.current_trio_token()
            for routed in plan.routed:
                if routed.rule.name in attempt.delivered:
                    routed.delivery = Delivery(0, token)  # acknowledged before the restart
        return plan

    def _plan(self, batch: RecordBatch, candidates: tuple[Rule, ...],
              provenance: BatchArrival) -> Plan:
        decide = self.table.decide
        plan = _BatchPlan(self.stats, batch.record_count)
        stay = STAY
        for i, headers in enumerate(batch.iter_headers()):
            decision = decide(candidates, headers, provenance, i)
            if decision is stay:  # the common case: no rule, nothing shadowed
                continue
            for shadowed in decision.shadowed:
                cluster = shadowed.target.cluster if shadowed.target else ""
                self.stats.count(shadowed.name, shadowed.action, cluster, SHADOW, 1)
            rule = decision.rule
            if rule is not None:
                rule.handler.apply(plan, rule, i)
        return Plan(list(plan.by_rule.values()), frozenset(plan.moved))

    def _send(self, topic: str, index: int, batch: RecordBatch, plan: Plan, acks: int,
              booked: tuple[Key, int, Attempt] | None) -> bool:
        """Hand the routed records to their producers, unless an earlier attempt of this
        batch delivered them; True when some delivery is to be waited for. `booked`: the
        sequence map's key, epoch and attempt of a tracked batch, whose deliveries are
        journaled."""
        records = batch.records
        origin = self.origin()
        seal = self.table.seal

        def mark(key: bytes | None, value: bytes | None) -> tuple[str, bytes]:
            return ORIGIN_HEADER, seal.mark(origin, key, value)

        base_ts = batch.base_timestamp
        token = trio.lowlevel.current_trio_token()
        for routed in plan.routed:
            d = routed.delivery
            if d is not None and (not d.done or d.ok):
                if d.ok:
                    self.stats.count(routed.rule.name, routed.rule.action, routed.cluster,
                                     DUPLICATE, len(routed.indexes))
                continue  # pending or delivered: a retry waits for it, sends nothing again
            rule, target = routed.rule, routed.rule.target
            assert target is not None
            dest = self.destinations[routed.cluster]
            delivery = Delivery(len(routed.indexes), token)
            out_topic = target.topic or topic
            tracing = self.tracing
            span = self._span(tracing, rule, routed, out_topic, records) if tracing else None
            delivery.on_done = self._finished(rule, routed.cluster, acks, span, booked)
            routed.delivery = delivery
            if target.partition == SAME:
                partition = index
            elif target.partition == KEY:
                partition = -1  # librdkafka's murmur2_random: the Java client's choice
            else:
                partition = target.partition
            # Herald's mark goes last: a record may carry an origin header a client wrote (no
            # mark this Herald verified, or it would not be routed), and the next Herald reads
            # the last one.
            size = dest.send_records(delivery, out_topic, partition,
                                     [records[i] for i in routed.indexes], mark, base_ts)
            self.stats.bytes.labels(rule.name, routed.cluster).inc(size)
        return True

    def _finished(self, rule: Rule, cluster: str, acks: int, span: Span | None,
                  booked: tuple[Key, int, Attempt] | None) -> Callable[[Delivery, int], None]:
        stats = self.stats
        remembered = self.remembered

        def done(delivery: Delivery, records: int) -> None:
            if delivery.error is None:
                outcome = BEST_EFFORT if acks == 0 else DELIVERED
                stats.ack_seconds.labels(cluster).observe(delivery.seconds)
                if booked is not None:
                    remembered.delivered(booked[0], booked[1], booked[2], rule.name)
            else:
                outcome = FAILED
            stats.count(rule.name, rule.action, cluster, outcome, records)
            if span is not None:
                end_span(span, delivery.error)

        return done

    def _span(self, tracing: Tracing, rule: Rule, routed: Routed, out_topic: str,
              records: list[Record]) -> Span | None:
        """A producer span for one routed batch, linked to its records' trace contexts
        (`tracing`: `self.tracing`, passed once the caller found it on)."""
        try:
            return start_span(tracing, rule.name, routed.cluster, out_topic,
                              [records[i].headers for i in routed.indexes])
        except Exception as exc:  # tracing never breaks traffic
            log.warning("routing_span_failed", error=repr(exc))
            self.tracing = None
            return None

    def _count_plan(self, plan: Plan, outcome: str) -> None:
        for r in plan.routed:
            self.stats.count(r.rule.name, r.rule.action, r.cluster, outcome, len(r.indexes))

    async def on_response(
        self, ctx: SessionContext, exchange: Exchange, api_key: int, version: int, msg: Message
    ) -> bool:
        note: Note | None = exchange.notes.get(self)
        if note is None:
            return False
        assert isinstance(msg, ProduceResponse), "only a Produce request leaves a note"
        answers = list(note.answers)
        by_id = version >= TOPIC_ID_VERSION
        responses = {(t.topic_id if by_id else t.name): t for t in msg.responses}
        changed = False
        for w in note.waiting:
            error = await _outcome(w.plans)
            if w.answer_ok:
                outcome = PartitionOutcome(REQUEST_TIMED_OUT, error) if error else OK_ANSWER
                answers.append(Rejected(w.name, w.topic_id, w.partition, outcome))
                continue
            if error is None:
                continue
            entry = responses.get(w.topic_id if by_id else w.name)
            for p in entry.partition_responses if entry is not None else ():
                if p.index == w.partition and p.error_code == NONE:
                    p.error_code = REQUEST_TIMED_OUT
                    p.base_offset = -1
                    if version >= PRODUCE_RECORD_ERRORS_VERSION:
                        p.error_message = error
                    changed = True
        merged = merge_answers(answers, version, msg)
        _log_start_known(answers, version, msg)
        return merged or changed


OK_ANSWER = PartitionOutcome()
SEQUENCE_UNKNOWN = ("Herald has not seen this producer epoch's first batch on this partition "
                    "(it restarted, or routing began later), so it cannot number the records "
                    "that stay; bump the epoch and send again")


def _log_start_known(answers: list[Rejected], version: int, msg: ProduceResponse) -> None:
    """UNKNOWN_PRODUCER_ID answers carry a log start offset: the Java client retries without
    bumping its epoch, forever, while it is -1 (unknown)."""
    unknown = {(r.topic_id if version >= TOPIC_ID_VERSION else r.name, r.partition) for r in answers
               if r.outcome.error_code == UNKNOWN_PRODUCER_ID}
    if not unknown:
        return
    for t in msg.responses:
        for p in t.partition_responses:
            if ((t.topic_id if version >= TOPIC_ID_VERSION else t.name), p.index) in unknown:
                p.log_start_offset = 0


async def _outcome(plans: list[Plan]) -> str | None:
    """Wait for every delivery of a partition; the first error, or None when all arrived."""
    error = None
    for plan in plans:
        for routed in plan.routed:
            d = routed.delivery
            if d is None:
                continue
            await d.event.wait()
            if d.error is not None and error is None:
                error = f"routing to cluster {routed.cluster} failed: {d.error}"
    return error


def _decompress_all(batches: list[RecordBatch | bytes], arrival: PartitionArrival) -> None:
    for b in batches:
        if isinstance(b, RecordBatch) and b.compression and b.record_count:
            b.decompress()
    if arrival.raw is not None:
        arrival.prepare()


def _kept_batch(batch: RecordBatch, moved: frozenset[int], attempt: Attempt | None) -> bytes:
    """The batch with the moved records taken out, renumbered, under the upstream sequence."""
    base_sequence = attempt.upstream_base if attempt is not None else batch.base_sequence
    if not moved:
        return with_base_sequence(batch.raw, base_sequence)
    kept = [r for i, r in enumerate(batch.records) if i not in moved]
    if not kept:
        return b""
    return build_batch(
        kept,
        compression=batch.compression,
        base_offset=batch.base_offset,
        base_timestamp=batch.base_timestamp,
        partition_leader_epoch=batch.partition_leader_epoch,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=base_sequence,
        is_transactional=batch.is_transactional,
        timestamp_type=batch.timestamp_type,
    )

