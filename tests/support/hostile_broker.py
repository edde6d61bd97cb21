"""A Kafka broker of one node that turns hostile: for the tests of what Herald does with bytes
a broker should never send.

It answers ApiVersions and Metadata correctly, keeps the records it is sent (so consumers
get what producers wrote, at real offsets), and answers Produce and Fetch requests, all with
the project's codecs. On the connections of clients whose client id starts with `victim`,
every response after the first Metadata is mutated at random with probability `rate`: bits
flipped, cut short or lengthened (the size prefix made to agree), a varint of 2^63 put in,
a length made huge, the correlation id changed, or the size prefix alone made to lie. Every
response goes out in pieces of random sizes, with short pauses. Other clients (Herald's own
connections, the tests' steady clients) always get well-formed answers.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
import uuid
from collections import defaultdict

from protocol.frame_headers import response_header_version
from protocol.messages.api_versions_response import ApiVersion, ApiVersionsResponse
from protocol.messages.fetch_response import (
    FetchableTopicResponse,
    FetchResponse,
    PartitionData,
)
from protocol.messages.metadata_response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from protocol.messages.produce_response import (
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from protocol.records import RecordBatch, split_batches
from proxy.net.wire import decode_request, expects_response, parse_request_header

PRODUCE, FETCH, METADATA, API_VERSIONS = 0, 1, 3, 18
VERSIONS = {PRODUCE: (3, 10), FETCH: (4, 16), METADATA: (1, 12), API_VERSIONS: (0, 4)}
"""What it speaks: Fetch up to v16 (its responses are walked as they stream natively when
address rewriting reads their tail), Produce up to v10 (its responses checked for tags)."""
MUTATIONS = ("bits", "truncate", "extend", "varint", "length", "correlation", "size")


def mutate(frame: bytes, rng: random.Random) -> tuple[bytes, str]:
    """A mutated copy of a response frame, and how it was mutated."""
    body = bytearray(frame[4:])
    kind = rng.choice(MUTATIONS)
    if kind == "bits":
        for _ in range(rng.randrange(1, 9)):
            at = rng.randrange(4, len(body)) if len(body) > 4 else 0
            body[at] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del body[rng.randrange(4, len(body)) if len(body) > 4 else len(body):]
    elif kind == "extend":
        body += rng.randbytes(rng.randrange(1, 64))
    elif kind == "varint":
        at = rng.randrange(4, len(body) + 1)
        body[at:at] = b"\x80" * 9 + b"\x01"
    elif kind == "length":
        at = rng.randrange(4, max(5, len(body) - 3))
        body[at:at + 4] = struct.pack(">i", rng.choice((0x7FFFFFFF, -2, 1000, 1 << 20)))
    elif kind == "correlation":
        body[:4] = struct.pack(">i", rng.randrange(1 << 31))
    else:  # the size prefix alone lies
        return struct.pack(">i", max(0, len(body) + rng.choice((-3, -1, 1, 7, 1000)))) + \
            bytes(body), kind
    return struct.pack(">i", len(body)) + bytes(body), kind


class HostileBroker:
    def __init__(self, rate: float = 0.3, seed: int = 1) -> None:
        self.rate = rate
        self.seed = seed
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.topic_ids: dict[str, bytes] = {}
        self.logs: dict[tuple[str, int], list[tuple[int, bytes]]] = defaultdict(list)
        self.mutated: dict[str, int] = defaultdict(int)
        self.connections = 0
        self._lock = threading.Lock()
        self._closing = False

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> HostileBroker:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def close(self) -> None:
        self._closing = True
        self.server.close()

    def __enter__(self) -> HostileBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closing:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                rng = random.Random(self.seed * 1_000_003 + self.connections)
            threading.Thread(target=self._serve, args=(conn, rng), daemon=True).start()

    def _serve(self, conn: socket.socket, rng: random.Random) -> None:
        metadata_seen = False
        buf = b""
        try:
            while True:
                while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                size = struct.unpack_from(">i", buf)[0]
                payload, buf = buf[4:4 + size], buf[4 + size:]
                head = parse_request_header(payload)
                out = self._answer(head, payload)
                if out is None:
                    continue
                victim = (head.client_id or "").startswith("victim")
                if victim and head.api_key != API_VERSIONS and (
                        metadata_seen or head.api_key != METADATA) and rng.random() < self.rate:
                    out, kind = mutate(out, rng)
                    with self._lock:
                        self.mutated[kind] += 1
                metadata_seen |= head.api_key == METADATA
                self._send_in_pieces(conn, out, rng)
        except OSError:
            return
        finally:
            conn.close()

    @staticmethod
    def _send_in_pieces(conn: socket.socket, data: bytes, rng: random.Random) -> None:
        while data:
            n = rng.choice((1, 2, 5, 17, 100, 1000, 8192, 65536))
            conn.sendall(data[:n])
            data = data[n:]
            if rng.random() < 0.05:
                time.sleep(0.002)

    # ---- the answers ----

    def _answer(self, head, payload: bytes) -> bytes | None:  # noqa: ANN001 - RequestHead
        api, version = head.api_key, head.api_version
        if api == API_VERSIONS:
            body = ApiVersionsResponse(api_keys=[
                ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in sorted(VERSIONS.items())]).encode(min(version, 4))
        elif api not in VERSIONS or not VERSIONS[api][0] <= version <= VERSIONS[api][1]:
            return None  # not spoken here: the client times out and gives up
        else:
            _, msg = decode_request(head, payload)
            if api == METADATA:
                body = self._metadata(msg, version)
            elif api == PRODUCE:
                response = self._produce(msg)
                if not expects_response(head, payload):
                    return None
                body = response.encode(version)
            else:
                body = self._fetch(msg, version)
        header = struct.pack(">i", head.correlation_id)
        if response_header_version(api, version) >= 1:
            header += b"\x00"
        frame = header + body
        return struct.pack(">i", len(frame)) + frame

    def _topic_id(self, name: str) -> bytes:
        with self._lock:
            return self.topic_ids.setdefault(name, uuid.uuid4().bytes)

    def _name_of(self, topic_id: bytes) -> str | None:
        with self._lock:
            return next((n for n, i in self.topic_ids.items() if i == topic_id), None)

    def _metadata(self, msg, version: int) -> bytes:  # noqa: ANN001
        if msg.topics is None:
            with self._lock:
                names = list(self.topic_ids)
        else:
            names = [t.name if t.name else self._name_of(t.topic_id) for t in msg.topics]
        topics = [MetadataResponseTopic(
            name=name, topic_id=self._topic_id(name), partitions=[MetadataResponsePartition(
                partition_index=0, leader_id=1, leader_epoch=0, replica_nodes=[1],
                isr_nodes=[1], offline_replicas=[])])
            for name in names if name]
        return MetadataResponse(
            brokers=[MetadataResponseBroker(node_id=1, host="127.0.0.1", port=self.port)],
            cluster_id="hostile-cluster", controller_id=1, topics=topics).encode(version)

    def _produce(self, msg) -> ProduceResponse:  # noqa: ANN001
        topics = []
        for t in msg.topic_data:
            name = t.name or self._name_of(t.topic_id) or ""
            parts = []
            for p in t.partition_data:
                with self._lock:
                    log = self.logs[(name, p.index)]
                    base = log[-1][0] + RecordBatch(log[-1][1]).record_count if log else 0
                    first = base
                    for batch in split_batches(bytes(p.records or b"")):
                        if not isinstance(batch, RecordBatch):
                            continue
                        data = bytearray(batch.to_bytes())
                        struct.pack_into(">q", data, 0, base)  # the CRC does not cover it
                        log.append((base, bytes(data)))
                        base += batch.record_count
                parts.append(PartitionProduceResponse(index=p.index, base_offset=first))
            topics.append(TopicProduceResponse(name=name, partition_responses=parts))
        return ProduceResponse(responses=topics)

    def _fetch(self, msg, version: int) -> bytes:  # noqa: ANN001
        topics, found = [], False
        for t in msg.topics:
            name = t.topic or self._name_of(t.topic_id) or ""
            parts = []
            for p in t.partitions:
                with self._lock:
                    log = list(self.logs[(name, p.partition)])
                end = log[-1][0] + RecordBatch(log[-1][1]).record_count if log else 0
                records, room = b"", max(p.partition_max_bytes, 1)
                for base, data in log:
                    if base + RecordBatch(data).record_count > p.fetch_offset and (
                            not records or len(records) + len(data) <= room):
                        records += data
                found |= bool(records)
                parts.append(PartitionData(
                    partition_index=p.partition, high_watermark=end, last_stable_offset=end,
                    log_start_offset=0, aborted_transactions=None, records=records))
            topics.append(FetchableTopicResponse(topic=name, topic_id=t.topic_id,
                                                 partitions=parts))
        if not found:  # nothing new: wait a little, as a broker waits up to max_wait_ms
            time.sleep(min(msg.max_wait_ms, 100) / 1000)
        return FetchResponse(responses=topics).encode(version)
