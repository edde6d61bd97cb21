"""Share-group records the fetch chain drops (KIP-932), settled so that they never come back.

A share group hands each record to one member and waits for it to be acknowledged; one never
acknowledged comes back when its acquisition lock ends, until the delivery limit, and is then
counted as failed. Real consumers differ on an offset that is acquired but holds no record:
Kafka's Java consumer acknowledges it as a gap, librdkafka's leaves it (seen through Herald
with both). So Herald settles what it drops itself, the way the protocol settles offsets that
hold no record: a dropped offset is taken out of the acquired ranges the consumer sees (it
never learns of it, whatever client it is), and acknowledged as a gap (`GAP`, which the
broker archives) in the next ShareFetch or ShareAcknowledge request of the same share session,
beside the consumer's own acknowledgements, which pass unchanged. No request of Herald's own
goes to the broker: one would move the share session's epoch under the client.

`ShareDrops` counts both halves, for an operator to see that it holds: the records dropped, and
those the broker acquired again after Herald had dropped them (expected 0; else a consumer
closed before its next request could carry Herald's acknowledgements, and the records were
dropped again when they came back).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from prometheus_client import Counter

from protocol.messages import share_acknowledge_request, share_fetch_request
from protocol.messages.share_fetch_response import AcquiredRecords
from protocol.records import RecordBatch, split_batches

CAPACITY = 100_000
"""The most dropped offsets remembered to recognise a redelivery; the oldest go first."""

GAP = 0
"""The acknowledge type of an offset that holds no record (KIP-932); the broker archives it."""

_PENDING = "share_gaps"
"""Where a session keeps the gaps it owes the broker (`SessionContext.attributes`)."""

_Batch = TypeVar(
    "_Batch", share_fetch_request.AcknowledgementBatch,
    share_acknowledge_request.AcknowledgementBatch,
)
"""An acknowledgement batch of ShareFetch or of ShareAcknowledge: the two differ only in their
class, and a batch Herald adds must be of the class of the request's own."""


class _AckPartition(Protocol[_Batch]):
    partition_index: int
    acknowledgement_batches: list[_Batch]


class _AckTopic(Protocol[_Batch]):
    topic_id: bytes

    @property
    def partitions(self) -> Sequence[_AckPartition[_Batch]]: ...


class _AckRequest(Protocol[_Batch]):
    """A ShareFetch or ShareAcknowledge request as `carry` reads it: the generated classes of the
    two (and of their parts) are distinct, their shape the same."""

    share_session_epoch: int

    @property
    def topics(self) -> Sequence[_AckTopic[_Batch]]: ...


def record_offsets(records: bytes) -> set[int]:
    """The offsets of the records (control records included) in a `records` field."""
    found: set[int] = set()
    for batch in split_batches(records):
        if isinstance(batch, RecordBatch):
            base = batch.base_offset
            found.update(base + r.offset_delta for r in batch.records)
    return found


def runs(offsets: set[int]) -> list[tuple[int, int]]:
    """Sorted offsets as (first, last) runs of consecutive ones."""
    out: list[tuple[int, int]] = []
    for offset in sorted(offsets):
        if out and out[-1][1] == offset - 1:
            out[-1] = (out[-1][0], offset)
        else:
            out.append((offset, offset))
    return out


def without(acquired: list[AcquiredRecords], gone: set[int]) -> list[AcquiredRecords]:
    """The acquired ranges with the offsets in `gone` taken out (a range may split)."""
    if not gone:
        return acquired
    kept: list[AcquiredRecords] = []
    for r in acquired:
        inside = {o for o in gone if r.first_offset <= o <= r.last_offset}
        if not inside:
            kept.append(r)
            continue
        left = set(range(r.first_offset, r.last_offset + 1)) - inside
        for first, last in runs(left):
            kept.append(type(r)(first_offset=first, last_offset=last,
                                delivery_count=r.delivery_count))
    return kept


@dataclass
class PendingGaps:
    """The gaps one session owes the broker, by (topic id, partition)."""

    offsets: dict[tuple[bytes, int], set[int]] = field(default_factory=dict)

    def add(self, topic_id: bytes, partition: int, gone: set[int]) -> None:
        self.offsets.setdefault((topic_id, partition), set()).update(gone)


def owed(attributes: dict[str, Any]) -> bool:
    """Whether a session owes the broker any gap (without making room for some)."""
    found = attributes.get(_PENDING)
    return found is not None and bool(found.offsets)


def pending(attributes: dict[str, Any]) -> PendingGaps:
    found = attributes.get(_PENDING)
    if found is None:
        found = attributes[_PENDING] = PendingGaps()
    return found


def carry(msg: _AckRequest[_Batch], gaps: PendingGaps, batch_cls: type[_Batch]) -> int:
    """Add the gaps a session owes to its client's ShareFetch or ShareAcknowledge request
    (`msg`), beside the client's own acknowledgements; the offsets carried.

    Only partitions the request names carry them: a consumer acknowledges the partitions it
    was given records of, so the next such request names them, and one that got an answer for
    a partition it did not name may fail on it (librdkafka's share consumer crashes on such a
    ShareAcknowledge response). A request that opens a share session (epoch 0) may carry no
    acknowledgement: the gaps wait."""
    if not gaps.offsets or msg.share_session_epoch == 0:
        return 0
    carried = 0
    for topic in msg.topics:
        for part in topic.partitions:
            offsets = gaps.offsets.pop((topic.topic_id, part.partition_index), None)
            if not offsets:
                continue
            part.acknowledgement_batches.extend(
                batch_cls(first_offset=first, last_offset=last, acknowledge_types=[GAP])
                for first, last in runs(offsets))
            part.acknowledgement_batches.sort(key=lambda b: b.first_offset)
            carried += len(offsets)
    return carried


class ShareDrops:
    """Counts the dropped records and their redeliveries; remembers the dropped offsets by
    (topic id, partition) to recognise one the broker acquires again."""

    def __init__(self, dropped: Counter, redelivered: Counter,
                 capacity: int = CAPACITY) -> None:
        self._dropped_total = dropped
        self._redelivered_total = redelivered
        self._capacity = capacity
        self._offsets: OrderedDict[tuple[bytes, int, int], None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._offsets)

    def dropped(self, topic_id: bytes, partition: int, acquired: list[AcquiredRecords],
                before: bytes, after: bytes | None) -> set[int]:
        """One partition of a ShareFetch response: `before` the records the broker sent,
        `after` what the chain left of them (None: unchanged). The acquired offsets the chain
        dropped, which the caller settles."""
        again = [r for r in acquired if r.delivery_count > 1]
        if again and self._offsets:
            redelivered = sum(
                (topic_id, partition, offset) in self._offsets
                for r in again for offset in range(r.first_offset, r.last_offset + 1))
            if redelivered:
                self._redelivered_total.inc(redelivered)
        if after is None:
            return set()
        gone = {o for o in record_offsets(before) - record_offsets(after)
                if any(r.first_offset <= o <= r.last_offset for r in acquired)}
        if gone:
            self._dropped_total.inc(len(gone))
            remembered = self._offsets
            for offset in gone:
                remembered[(topic_id, partition, offset)] = None
                remembered.move_to_end((topic_id, partition, offset))
            while len(remembered) > self._capacity:
                remembered.popitem(last=False)
        return gone
