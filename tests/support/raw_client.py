"""A Kafka client at the level of frames, for tests that must see exact bytes.

Requests are built with Herald's own codec (itself checked against Kafka's Java classes by the
differential test); what matters here is that the broker and Herald see real frames.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

import trio

from protocol.frame_headers import encode_request_header
from protocol.framing import FrameDecoder, frame
from protocol.messages.api_versions_request import ApiVersionsRequest
from protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from protocol.messages.metadata_request import MetadataRequest
from protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from protocol.messages.request_header import RequestHeader
from protocol.records import Record, build_batch


def request_frame(
    api_key: int, version: int, corr: int, body: Any, client_id: str = "raw"
) -> bytes:
    out = bytearray()
    encode_request_header(
        RequestHeader(request_api_key=api_key, request_api_version=version,
                      correlation_id=corr, client_id=client_id),
        out,
    )
    if isinstance(body, bytes | bytearray):
        out += body
    else:
        body.encode_into(out, version)
    return frame(bytes(out))


def api_versions(corr: int) -> bytes:
    return request_frame(18, 3, corr, ApiVersionsRequest(
        client_software_name="raw", client_software_version="1"))


def metadata(corr: int, topics: list[str] | None = None) -> bytes:
    from protocol.messages.metadata_request import MetadataRequestTopic

    wanted = None if topics is None else [MetadataRequestTopic(name=t) for t in topics]
    return request_frame(3, 12, corr, MetadataRequest(topics=wanted))


def produce(
    corr: int,
    topic: str,
    values: list[bytes],
    acks: int = 1,
    version: int = 9,
    topic_id: bytes | None = None,
    headers: list[tuple[str, bytes | None]] | None = None,
) -> bytes:
    """Produce to partition 0; from v13 on the topic is named by `topic_id` only."""
    batch = build_batch([Record(value=v, headers=list(headers or [])) for v in values])
    named = {"topic_id": topic_id} if version >= 13 else {"name": topic}
    body = ProduceRequest(acks=acks, timeout_ms=10000, topic_data=[TopicProduceData(
        **named, partition_data=[PartitionProduceData(index=0, records=batch)])])
    return request_frame(0, version, corr, body)


def fetch(
    corr: int,
    topic: str,
    offset: int = 0,
    max_wait_ms: int = 100,
    version: int = 12,
    topic_id: bytes | None = None,
) -> bytes:
    """Fetch partition 0; from v13 on the topic is named by `topic_id` only."""
    named = {"topic_id": topic_id} if version >= 13 else {"topic": topic}
    body = FetchRequest(max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, topics=[
        FetchTopic(**named, partitions=[FetchPartition(
            partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])])
    return request_frame(1, version, corr, body)


def list_groups(corr: int) -> bytes:
    """ListGroups v3: an API Herald has no codec for; its body is an empty tag section."""
    return request_frame(16, 3, corr, b"\x00")


def correlation_id(payload: bytes) -> int:
    return struct.unpack_from(">i", payload)[0]


class TrioRawClient:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()
        self.pending: list[bytes] = []
        self.received = bytearray()

    @classmethod
    async def connect(cls, address: str) -> TrioRawClient:
        host, port = address.rsplit(":", 1)
        return cls(await trio.open_tcp_stream(host, int(port)))

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def recv(self, timeout: float = 15.0) -> bytes | None:
        """The next response payload, or None once the peer closed the connection."""
        with trio.fail_after(timeout):
            while not self.pending:
                try:
                    data = await self.stream.receive_some(65536)
                except trio.BrokenResourceError:
                    return None
                if not data:
                    return None
                self.received += data
                self.decoder.feed(data)
                self.pending.extend(self.decoder.frames())
        return self.pending.pop(0)

    async def aclose(self) -> None:
        await self.stream.aclose()


class SocketRawClient:
    """The same, with a blocking socket, for tests that drive a Herald subprocess."""

    def __init__(self, address: str, timeout: float = 15.0) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.decoder = FrameDecoder()
        self.pending: list[bytes] = []

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self) -> bytes | None:
        while not self.pending:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.decoder.feed(data)
            self.pending.extend(self.decoder.frames())
        return self.pending.pop(0)

    def close(self) -> None:
        self.sock.close()


def round_trip(address: str, api_key: int, version: int, body: Any,
               timeout: float = 15.0) -> Any:
    """One request on a fresh connection; the decoded response message."""
    from proxy.net.wire import decode_response

    client = SocketRawClient(address, timeout=timeout)
    try:
        client.send(request_frame(api_key, version, 1, body))
        payload = client.recv()
    finally:
        client.close()
    assert payload is not None, f"{address} closed the connection without an answer"
    return decode_response(api_key, version, payload)[1]
