"""Record real Kafka traffic and write the seed corpora of the native fuzz targets.

A broker from the test harness (`proxy.devtools.embedded_kafka`, the cached jars) gets an
extra listener that advertises a recorder's port, so every connection of a client that
bootstraps through the recorder goes through it. Real clients then produce and consume
through it: librdkafka (confluent-kafka), kafka-python and the Java console tools, records
with and without headers (their own traceparent and tracestate, headers the fetch plan
drops), compressed and not, acks 0, 1 and all. The recorder keeps each connection's bytes
in the pieces they came in.

From those conversations it writes small seeds, in each target's input format (see the
targets' comments), into fuzz/corpus/<target>/: Produce requests for the stamp and the acks
reader, Fetch responses (and their records fields) for the scan and the streamed walk, header
values for the trace checks, and for the engine, scripts that replay a connection's requests
and responses in the recorded pieces. The corpus is committed; run this again when the
clients or the broker change:

    .venv/bin/python fuzz/native/capture_seeds.py [--out fuzz/corpus]
"""

from __future__ import annotations

import argparse
import hashlib
import pathlib
import random
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict

REPO = pathlib.Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, Producer  # noqa: E402

from proxy.devtools.embedded_kafka import ExtraListener, KafkaCluster, free_port  # noqa: E402
from proxy.native.capabilities import CAPABILITIES  # noqa: E402
from proxy.native.path_choice import PASS, SCAN, STAMP, UNLESS_TAGGED  # noqa: E402
from proxy.net.wire import (  # noqa: E402
    decode_request,
    decode_response,
    parse_request_header,
)
from tests.support.clients import create_topic  # noqa: E402
from tests.support.java_tools import (  # noqa: E402
    CONSOLE_CONSUMER,
    CONSOLE_PRODUCER,
    run_tool,
    tool_command,
)

PRODUCE, FETCH = 0, 1
Chunk = tuple[str, bytes]  # ("c", client to broker) or ("b", broker to client)


class Recorder:
    """A TCP relay that keeps every connection's bytes, in the pieces they arrived in."""

    def __init__(self, listen_port: int, broker_port: int) -> None:
        self.broker_port = broker_port
        self.server = socket.create_server(("127.0.0.1", listen_port))
        self.conversations: list[list[Chunk]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.broker_port))
            log: list[Chunk] = []
            with self._lock:
                self.conversations.append(log)
            for src, dst, tag in ((client, upstream, "c"), (upstream, client, "b")):
                threading.Thread(target=self._pump, args=(src, dst, tag, log),
                                 daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, tag: str,
              log: list[Chunk]) -> None:
        try:
            while data := src.recv(65536):
                with self._lock:
                    log.append((tag, data))
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.server.close()


def traceparent(rng: random.Random) -> bytes:
    return f"00-{rng.randbytes(16).hex()}-{rng.randbytes(8).hex()}-01".encode()


def headers(rng: random.Random, i: int) -> list[tuple[str, bytes]]:
    kind = i % 6
    if kind == 0:
        return []
    if kind == 1:
        return [("traceparent", traceparent(rng)), ("tracestate", b"vendor=abc,other=1")]
    if kind == 2:
        return [("x-debug", b"1"), ("app", b"checkout")]
    if kind == 3:
        return [("x-tenant-blue", b"7")]
    if kind == 4:
        return [("traceparent", traceparent(rng))]
    return [("app", rng.randbytes(rng.randrange(20)))]


def drive_clients(bootstrap: str) -> None:
    rng = random.Random(7)
    topics = []
    for codec in ("none", "lz4"):
        topic = f"seeds-{codec}-{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, topic, partitions=2)
        topics.append(topic)
        for acks in ("1", "all", "0"):
            producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                                 "acks": acks, "linger.ms": 20})
            for i in range(30):
                producer.produce(topic, value=rng.randbytes(rng.choice((0, 10, 300))),
                                 key=None if i % 4 == 0 else f"k{i}".encode(),
                                 headers=headers(rng, i))
            producer.flush(30)
    for topic in topics:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([topic])
        got, deadline = 0, time.monotonic() + 30
        while got < 60 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got += 1
        consumer.close()
    try:
        from kafka import KafkaConsumer, KafkaProducer
    except ImportError:
        pass
    else:
        producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=10)
        for i in range(20):
            producer.send(topics[0], value=b"kp-%d" % i, headers=headers(rng, i))
        producer.flush()
        producer.close()
        consumer = KafkaConsumer(topics[0], bootstrap_servers=bootstrap,
                                 auto_offset_reset="earliest", consumer_timeout_ms=5000)
        for _ in consumer:
            pass
        consumer.close()
    # The Java clients speak the newest versions (Produce v11+, Fetch v16+).
    lines = "".join(f"traceparent:{traceparent(rng).decode()},x-debug:1\tjava-{i}\n"
                    for i in range(10))
    run_tool(CONSOLE_PRODUCER, "--bootstrap-server", bootstrap, "--topic", topics[0],
             "--property", "parse.headers=true", input=lines, timeout=120)
    # Its output is the records' values, random bytes: not text.
    subprocess.run(tool_command(CONSOLE_CONSUMER, "--bootstrap-server", bootstrap, "--topic",
                                topics[0], "--from-beginning", "--max-messages", "30",
                                "--timeout-ms", "20000"), capture_output=True, timeout=120)


# ---- frames of a conversation ---------------------------------------------------------


def frames(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while len(data) - pos >= 4:
        (size,) = struct.unpack_from(">i", data, pos)
        if size < 0 or pos + 4 + size > len(data):
            break
        out.append(data[pos:pos + 4 + size])
        pos += 4 + size
    return out


def exchanges(log: list[Chunk]) -> list[tuple[tuple[int, int], bytes, bytes | None]]:
    """((api, version), request frame, response frame or None) in request order."""
    requests = frames(b"".join(d for t, d in log if t == "c"))
    responses = {struct.unpack_from(">i", f, 4)[0]: f
                 for f in frames(b"".join(d for t, d in log if t == "b"))}
    out = []
    for f in requests:
        head = parse_request_header(f[4:])
        out.append(((head.api_key, head.api_version), f, responses.get(head.correlation_id)))
    return out


# ---- seeds, in each target's input format ----------------------------------------------


class Corpus:
    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.count: dict[str, int] = {}

    def add(self, target: str, data: bytes, limit: int = 24) -> None:
        if self.count.get(target, 0) >= limit or len(data) > 16 * 1024:
            return
        folder = self.root / target
        folder.mkdir(parents=True, exist_ok=True)
        (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)
        self.count[target] = self.count.get(target, 0) + 1


def produce_fields(frame: bytes) -> list[bytes]:
    head = parse_request_header(frame[4:])
    _, msg = decode_request(head, frame[4:])
    return [bytes(p.records) for t in msg.topic_data for p in t.partition_data if p.records]


def records_fields(frame: bytes, version: int) -> list[bytes]:
    _, msg = decode_response(FETCH, version, frame[4:])
    return [bytes(p.records) for t in msg.responses for p in t.partitions if p.records]


def record_headers(fields: list[bytes]) -> list[bytes]:
    from protocol.records import split_batches

    values = []
    for field in fields:
        for batch in split_batches(field):
            try:
                values += [v for r in batch.records for _, v in r.headers if v]
            except Exception:  # noqa: BLE001 - compressed or partial: not needed here
                continue
    return values


def engine_script(rng: random.Random, log: list[Chunk], stamp: bool, scan: bool) -> bytes | None:
    """The engine target's input replaying a connection's Produce and Fetch exchanges (and
    one other kind that passes), its requests and responses cut as they were recorded."""
    ex = [(pair, req, resp) for pair, req, resp in exchanges(log)
          if pair[0] in (PRODUCE, FETCH)]
    if not ex:
        return None
    pairs = sorted({pair for pair, _, _ in ex})[:8]
    table = []
    for api, ver in pairs:
        if api == PRODUCE:
            value = STAMP if stamp else PASS
        else:
            value = SCAN if scan else (UNLESS_TAGGED if ver in CAPABILITIES.tags[FETCH] else PASS)
        table.append(bytes([api, ver, value]))
    table += [b"\x12\x03\x01"] * (8 - len(table))  # ApiVersions v3 passes
    config = bytes([0x0c | rng.randrange(4), (1 if stamp else 0) | (2 if scan else 0), 0x3f])
    out = bytearray(config + b"".join(table) + b"\x00")  # no prefill

    def write(op: int, data: bytes) -> None:
        for i in range(0, len(data), 4096):
            piece = data[i:i + 4096]
            out.extend(bytes([op]) + struct.pack(">H", len(piece) - 1) + piece)

    for pair, req, resp in ex:
        if pair not in pairs:
            continue
        cut = rng.randrange(1, len(req)) if len(req) > 1 and rng.random() < 0.5 else len(req)
        write(0, req[:cut])
        out.append(4)  # a turn
        write(0, req[cut:])
        out.extend(b"\x0e\x06")  # two turns, the sides read
        if resp is not None:
            cut = rng.randrange(1, len(resp)) if len(resp) > 1 else len(resp)
            write(1, resp[:cut])
            out.append(4)
            write(1, resp[cut:])
            out.extend(b"\x0e\x06")
    out.extend(b"\x08")  # drain (op 8, sub-op 0)
    out.extend(b"\x22")  # four turns
    return bytes(out)


def write_seeds(conversations: list[list[Chunk]], root: pathlib.Path) -> Corpus:
    rng = random.Random(1)
    corpus = Corpus(root)
    values: list[bytes] = []
    engine_kinds: dict[tuple[str | None, bool, bool], int] = defaultdict(int)
    for log in conversations:
        for (api, ver), req, resp in exchanges(log):
            if api == PRODUCE:
                for which in (0, 1, 2):
                    corpus.add("fuzz_stamp", bytes([which]) + req)
                if 3 <= ver <= 13:
                    for field in produce_fields(req)[:1]:
                        corpus.add("fuzz_stamp", bytes([0x20 | rng.randrange(3), ver - 3]) + field,
                                   limit=48)
                if len(req) <= 600:
                    corpus.add("fuzz_frames", bytes([ver]) + req)
                if resp is not None and 10 <= ver <= 13 and len(resp) <= 600:
                    corpus.add("fuzz_frames", bytes([ver | (ver - 10) << 5]) + resp)
            if api == FETCH and resp is not None and 4 <= ver <= 18:
                corpus.add("fuzz_fetch_scan", bytes([ver - 4 | (0x10 if ver >= 16 else 0)])
                           + resp)
                fields = records_fields(resp, ver)
                for field in fields[:2]:
                    corpus.add("fuzz_fetch_scan", bytes([0x80 | (ver - 4)]) + field)
                    # The same records in a ShareFetch response (v1-v2; the last byte's bit 1
                    # picks it: one byte more in a records field is a partial batch).
                    corpus.add("fuzz_fetch_scan", bytes([0x80 | (1 + ver % 2)]) + field + b"\x02")
                values += record_headers(fields)
                if ver >= 13:
                    corpus.add("fuzz_fetch_walk", b"\x00" + resp[8:])
                    cuts = bytes(rng.randrange(256) for _ in range(9))
                    corpus.add("fuzz_fetch_walk", b"\x09" + cuts + resp[8:])
        # The engine's seeds, a few of each kind of connection: a producer's (its requests
        # passed, or stamped), a consumer's (responses passed, walked as they stream when
        # v16+, or scanned).
        apis = {api for (api, _), _, _ in exchanges(log)}
        kind = "fetch" if FETCH in apis else "produce" if PRODUCE in apis else None
        variants = {"produce": ((False, False), (True, False)),
                    "fetch": ((False, False), (False, True))}.get(kind, ())
        for stamp, scan in variants:
            script = engine_script(rng, log, stamp, scan)
            if script is not None and engine_kinds[(kind, stamp, scan)] < 4:
                engine_kinds[(kind, stamp, scan)] += 1
                corpus.add("fuzz_engine", script)
    for value in values:
        corpus.add("fuzz_trace", value, limit=30)
    return corpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=REPO / "fuzz" / "corpus")
    args = parser.parse_args()
    broker_port, recorder_port = free_port(), free_port()
    listener = ExtraListener("REC", broker_port, recorder_port)
    with KafkaCluster(size=1, extra_listeners=[listener]):
        recorder = Recorder(recorder_port, broker_port)
        try:
            drive_clients(f"127.0.0.1:{recorder_port}")
            time.sleep(1)
        finally:
            recorder.close()
    for target in ("fuzz_stamp", "fuzz_frames", "fuzz_fetch_scan", "fuzz_fetch_walk",
                   "fuzz_trace", "fuzz_engine"):
        shutil.rmtree(args.out / target, ignore_errors=True)
    corpus = write_seeds(recorder.conversations, args.out)
    for target, n in sorted(corpus.count.items()):
        print(f"{target}: {n} seeds")


if __name__ == "__main__":
    main()
