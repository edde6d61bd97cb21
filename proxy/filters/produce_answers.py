"""Partitions of a Produce request Herald answers itself: a member that refuses a partition
takes it out of the request and notes it here, and the broker's response gets it back with
the member's error (the interceptor chains' limits and rejections, routing's refusals)."""

from __future__ import annotations

from dataclasses import dataclass

from interceptors import PartitionOutcome
from protocol.contracts.features import PRODUCE_RECORD_ERRORS_VERSION, TOPIC_ID_VERSION
from protocol.messages.produce_response import (
    BatchIndexAndErrorMessage,
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)


@dataclass(slots=True)
class Rejected:
    """A partition Herald refused, and the outcome its answer carries."""

    name: str
    topic_id: bytes
    partition: int
    outcome: PartitionOutcome


def merge_answers(answers: list[Rejected], version: int, msg: ProduceResponse) -> bool:
    """Put the partitions Herald answered itself into the broker's Produce response (their
    topic entry is made when the broker saw none of the topic); True when there were any."""
    by_id = version >= TOPIC_ID_VERSION
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
            error_message=(r.outcome.error_message if version >= PRODUCE_RECORD_ERRORS_VERSION
                           else None),
            record_errors=[
                BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                for i, m in r.outcome.record_errors
            ] if version >= PRODUCE_RECORD_ERRORS_VERSION else [],
        ))
    return bool(answers)
