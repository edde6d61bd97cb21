"""The batch size limit of each topic, learned from the cluster and kept current.

The broker refuses a record batch larger than the topic's `max.message.bytes` (which
defaults to the broker's `message.max.bytes`, 1,048,588). Herald adds headers to batches, so
it must know that limit to keep every batch it changed under it (see
`interceptors.batch_fit`). It asks with DescribeConfigs (v1, which Kafka 3.x and 4.x accept)
on its own connection to the cluster: a topic the first time a Produce request names it, and
every known topic again every `refresh_s`, so `kafka-configs --alter` is followed. Until a
topic's answer arrives the broker default is assumed.

Only these two fields of DescribeConfigs are needed, so the request and the reading of its
answer are written here by hand instead of adding the API to the generated codecs (whose
APIs are also the ones Herald advertises and decodes on clients' behalf).
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable, Iterable

import trio

from protocol.api_keys import ApiKey
from protocol.contracts.kafka_errors import NONE
from protocol.primitives import Reader
from proxy.observability.logs import get_logger

log = get_logger("topic_limits")

BROKER_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588
"""Kafka's default `message.max.bytes`: what a topic allows unless configured otherwise."""

MAX_TOPICS = 10_000
"""Topics whose limit is remembered; past this the oldest are forgotten (and asked again)."""

_DESCRIBE_CONFIGS = int(ApiKey.DESCRIBE_CONFIGS)
_VERSION = 1
_TOPIC = 2  # ConfigResource type
_KEY = "max.message.bytes"


def describe_request(correlation_id: int, topics: Iterable[str]) -> bytes:
    """A DescribeConfigs v1 request (header v1) for `max.message.bytes` of `topics`."""
    names = list(topics)
    client = b"herald"
    out = bytearray(struct.pack(">hhih", _DESCRIBE_CONFIGS, _VERSION, correlation_id,
                                len(client)))
    out += client
    out += struct.pack(">i", len(names))
    key = _KEY.encode()
    for name in names:
        raw = name.encode()
        out += struct.pack(">bh", _TOPIC, len(raw)) + raw
        out += struct.pack(">ih", 1, len(key)) + key
    out += b"\x00"  # include_synonyms: false
    return bytes(out)


def parse_describe_response(payload: bytes) -> dict[str, int]:
    """{topic: max.message.bytes} from a DescribeConfigs v1 response; topics the broker
    answered with an error (unknown topic, not authorized) are left out."""
    r = Reader(payload)
    r.int32()  # correlation id
    r.int32()  # throttle_time_ms
    out: dict[str, int] = {}
    for _ in range(r.int32()):
        error = r.int16()
        r.nullable_string()
        r.int8()
        name = r.string()
        value = None
        for _ in range(r.int32()):
            key = r.string()
            text = r.nullable_string()
            r.bool()
            r.int8()
            r.bool()
            for _ in range(r.int32()):
                r.string()
                r.nullable_string()
                r.int8()
            if key == _KEY and text is not None and text.isdigit():
                value = int(text)
        if error == NONE and value is not None:
            out[name] = value
    return out




class TopicLimits:
    """The known limits, and the task that learns and refreshes them."""

    def __init__(self, request: Callable[[bytes], Awaitable[bytes]], refresh_s: float = 60.0
                 ) -> None:
        """`request` sends one request payload to the cluster (TLS and Herald's own SASL
        included) and returns the response payload: `UpstreamCluster.request_once`."""
        self.request = request
        self.refresh_s = refresh_s
        self.known: dict[str, int] = {}
        self._wanted: set[str] = set()  # to ask about now
        self._asked: set[str] = set()  # asked once: only the refresh asks again
        self._wake = trio.Event()

    def limit(self, topic: str) -> int:
        """The topic's batch size limit (the broker default until it has been learned)."""
        found = self.known.get(topic)
        if found is None:
            if topic not in self._asked and len(self._asked) < MAX_TOPICS:
                self._asked.add(topic)
                self._wanted.add(topic)
                self._wake.set()
            return BROKER_DEFAULT_MAX_MESSAGE_BYTES
        return found

    async def run(self) -> None:
        """Learn new topics as they are asked for; refresh all of them every `refresh_s`."""
        next_refresh = trio.current_time() + self.refresh_s
        while True:
            with trio.move_on_at(next_refresh):
                await self._wake.wait()
            self._wake = trio.Event()
            if trio.current_time() >= next_refresh:
                topics = set(self.known) | self._asked
                next_refresh = trio.current_time() + self.refresh_s
            else:
                topics = set(self._wanted)
            if topics:
                await self.learn(sorted(topics))

    async def learn(self, topics: list[str]) -> bool:
        try:
            found = parse_describe_response(await self.request(describe_request(1, topics)))
        except (ConnectionError, ValueError) as exc:
            # A SASL cluster Herald has no credentials for answers no one but its clients:
            # the broker default stays assumed.
            log.info("topic_limits_failed", error=str(exc))
            await trio.sleep(min(5.0, self.refresh_s))  # do not spin
            return False
        for topic, value in found.items():
            if self.known.get(topic) != value:
                log.info("topic_limit", topic=topic, max_message_bytes=value)
            self.known[topic] = value
        # Topics that do not exist yet are asked about again by the next refresh.
        self._wanted.difference_update(topics)
        return True
