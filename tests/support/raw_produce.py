"""One Produce request (v9, acks=1) as a raw frame, sent on a connection of its own with its
answer decoded and timed: for tests that must control exactly what one request holds."""

from __future__ import annotations

import time

from protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from protocol.messages.produce_response import ProduceResponse
from tests.support import raw_client as raw
from tests.support.herald_process import HeraldProcess


def produce_request(corr: int, topic: str, records: bytes) -> bytes:
    body = ProduceRequest(acks=1, timeout_ms=30000, topic_data=[TopicProduceData(
        name=topic, partition_data=[PartitionProduceData(index=0, records=records)])])
    return raw.request_frame(0, 9, corr, body)


def send_and_answer(proc: HeraldProcess, request: bytes) -> tuple[object, float]:
    client = raw.SocketRawClient(proc.bootstrap, timeout=120)
    try:
        started = time.monotonic()
        client.send(request)
        payload = client.recv()
        took = time.monotonic() - started
    finally:
        client.close()
    assert payload is not None
    msg = ProduceResponse.decode(payload, 9, 5)  # correlation id, then a tagged section
    return msg.responses[0].partition_responses[0], took
