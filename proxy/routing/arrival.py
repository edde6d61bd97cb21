"""Whether a record arrived with Herald's origin mark, judged on the record as it reached Herald.

Routing runs after the interceptor chains, and the chains may change what routing would read:
`audit` strips every header under its prefix (``herald.``, the origin header's too) from
every client, another Herald's producer included; members that rewrite keys or values make a
valid mark fail to verify. Were the mark read there, whether a record is routed again would
depend on what the chains hold. So `Arrivals`, a filter-chain member placed before the
chains, keeps a reference to each routed partition's records as they arrived (no copy, no
parsing), and the routing filter checks the mark on those:

* a partition the chains did not change is its own arrival: nothing more is read;
* otherwise the arrived batch is read only once a move or mirror rule matches one of its
  records, and its records only if the origin header's key occurs in its (decompressed)
  bytes at all; a partition large enough to be decompressed in a worker thread has its
  arrived batches decompressed there too, up front.

The records routed and kept are always the ones the chains made: only the mark is judged on
the arrival.
"""

from __future__ import annotations

from typing import Any, Protocol

from protocol.errors import CodecError
from protocol.message import Message
from protocol.messages import ProduceRequest
from protocol.messages.produce_request import TopicProduceData
from protocol.primitives import Buffer
from protocol.records import RecordBatch, split_batches
from proxy.filters.chain import NATIVE_NOTHING, Exchange, Filter, SessionContext
from proxy.routing.origin import OriginSeal
from proxy.routing.predicates import Header, last_value
from proxy.routing.rules import ORIGIN_HEADER, RoutingTable
from proxy.upstream.topic_ids import TopicIds


class Routing(Protocol):
    """What arrivals read of the routing filter (`produce_filter.RoutingFilter`): its rules
    and the topic names of topic ids."""

    table: RoutingTable
    topics: TopicIds

    def wants_request(self, api_key: int, version: int) -> bool: ...


ArrivedKey = tuple[str, bytes, int]  # topic name, topic id, partition: as the request has them
_NEEDLE = ORIGIN_HEADER.encode()


def arrived_key(topic: TopicProduceData, partition: int) -> ArrivedKey:
    """The key of a partition of a Produce request's topic entry."""
    return (topic.name, topic.topic_id, partition)


class Arrivals(Filter):
    """Keeps, per Produce request, the records of the partitions a move or mirror rule may
    apply to, as they arrived, for the routing filter after the chains (`take`)."""

    name = "routing-arrivals"
    # The engine takes over nothing this member reads: it reads what arrives for routing, in
    # Python.
    native = NATIVE_NOTHING

    def __init__(self, routing: Routing) -> None:
        self.routing = routing

    def wants_request(self, api_key: int, version: int) -> bool:
        return self.routing.wants_request(api_key, version)

    async def on_request(
        self, ctx: SessionContext, exchange: Exchange, api_key: int, version: int, msg: Message
    ) -> bool:
        assert isinstance(msg, ProduceRequest), "wants_request asks for no other"
        table = self.routing.table
        kept: dict[ArrivedKey, Buffer] = {}
        for t in msg.topic_data:
            topic = t.name if version < 13 else self.routing.topics.name(t.topic_id)
            if not topic or not any(r.handler.routes
                                    for r in table.candidates(topic, ctx.client_id)):
                continue
            for p in t.partition_data:
                if p.records is not None:
                    kept[arrived_key(t, p.index)] = p.records
        if kept:
            exchange.notes[self] = kept
        return False

    def take(self, exchange: Exchange) -> dict[ArrivedKey, Buffer] | None:
        """What `on_request` kept for this exchange, removed from its notes (a note asks for
        the response to be decoded, and this member has nothing to do there)."""
        kept: dict[ArrivedKey, Buffer] | None = exchange.notes.pop(self, None)
        return kept


class PartitionArrival:
    """How one partition's records arrived: `raw` is the records field as it came, or None
    when routing sees those very bytes."""

    __slots__ = ("seal", "raw", "_batches", "_may_carry")

    def __init__(self, seal: OriginSeal, raw: Any = None) -> None:
        self.seal = seal
        self.raw = raw
        self._batches: list[RecordBatch | bytes] | None = None
        self._may_carry: dict[int, bool] = {}

    def prepare(self) -> None:
        """Split and decompress the arrived batches now, and look for the origin header's
        key in each (for a worker thread: the partition is large)."""
        for n in range(len(self._split())):
            self._arrived(n)

    def batch(self, n: int, seen: RecordBatch) -> BatchArrival:
        """The arrival of batch `n` of the partition, which routing sees as `seen`."""
        return BatchArrival(self, n, seen)

    def _split(self) -> list[RecordBatch | bytes]:
        if self._batches is None:
            try:
                self._batches = split_batches(self.raw)
            except CodecError:
                self._batches = []  # no arrival to read: no mark is trusted
        return self._batches

    def _arrived(self, n: int) -> RecordBatch | None:
        """Arrived batch `n`, if some record of it may carry the origin header."""
        batches = self._split()
        if n >= len(batches):
            return None
        b = batches[n]
        if not isinstance(b, RecordBatch):
            return None
        may = self._may_carry.get(n)
        if may is None:
            try:
                buf, start, end = b.records_section()  # decompresses once, checks the CRC
                may = buf.find(_NEEDLE, start, end) >= 0
            except CodecError:  # a bad CRC, or over the decompression bound
                may = False
            self._may_carry[n] = may
        return b if may else None


class BatchArrival:
    """`rules.Provenance` for one batch: asked only for records a move or mirror rule
    matches, it reads the arrival of the batch on the first question."""

    __slots__ = ("_partition", "_n", "_seen", "_source")

    def __init__(self, partition: PartitionArrival, n: int, seen: RecordBatch) -> None:
        self._partition = partition
        self._n = n
        self._seen = seen
        self._source: RecordBatch | None | bool = False  # False: not looked up yet

    def sealed(self, index: int, headers: list[Header]) -> bool:
        """Whether record `index` arrived with an origin mark this Herald's seal verifies (the
        last origin header counts, as predicates read the last value of a key)."""
        source = self._source
        if source is False:
            source = self._source = self._lookup()
        if source is None:
            return False
        assert isinstance(source, RecordBatch)
        if source is not self._seen:
            headers = source.records[index].current_headers()
        mark = last_value(headers, ORIGIN_HEADER)
        if not isinstance(mark, bytes):
            return False
        record = source.records[index]
        return self._partition.seal.verifies(mark, record.key, record.value)

    def _lookup(self) -> RecordBatch | None:
        if self._partition.raw is None:
            return self._seen
        source = self._partition._arrived(self._n)
        if source is not None and source.record_count != self._seen.record_count:
            return None  # not the same records: nothing to compare (chains never do this)
        return source
