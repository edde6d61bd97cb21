"""Tail latency, memory and idle CPU of Herald while it holds thousands of idle connections.

    python bench/bench_idle_connections.py [--connections 0,1000,4000,10000] [--seconds 30]
                                           [--warmup-seconds 15] [--idle-seconds 10]
                                           [--per-source 500]
                                           [--gc-stats] [--past-fd-limit] [--unpinned]
                                           [--data-dir DIR]

A fleet's producers and consumers mostly sit idle on connections they opened long ago; a proxy
that slows down as it holds more of them fails at the tail long before throughput shows it.
This starts one broker and one Herald in front of it with the shipped configuration (its
produce chain is `trace_context` + `audit`), warms both up with `--warmup-seconds` of each
live client below (not measured: a fresh broker JVM is orders of magnitude slower in its first
seconds), then for each N of `--connections`, smallest first:

1. **Held connections.** Connections are added until N are held, each after real work: on its
   own socket, ApiVersions, Metadata and one Produce of a record carrying a W3C `traceparent`
   (acks=all, client id `idle-<i>`), then it stays open and silent. They are opened from one
   thread with trio, 64 at a time, from loopback source addresses 127.0.0.2, 127.0.0.3, ...,
   `--per-source` connections each (below Herald's per-source limit, default 1,000: that limit
   is not what is measured). Connections accumulate over the steps, so the largest N is reached
   once; every step checks how many of the held sockets are still open.
2. **Memory.** Herald's VmRSS (/proc/PID/status) just before and just after the step's new
   connections: RSS per connection is the growth divided by the connections added, in KiB.
   Herald's open file descriptors are counted too (/proc/PID/fd), and how much of its memory
   budget (`limits.memory_budget_bytes`, from /metrics) the held sessions have booked: room
   every read must find, so a budget booked full by idle sessions stalls the busy ones.
3. **Idle CPU.** Herald's user + system time (/proc/PID/stat) over `--idle-seconds` with N held
   and no traffic at all, in millicores.
4. **Produce latency.** A librdkafka producer (confluent-kafka) at 1,000 records/s, 1 KiB,
   acks=all, `linger.ms=0`, each record traced, for `--seconds` straight to the broker and for
   `--seconds` through Herald, one after the other (the order alternates per step), each after
   2 s of warm-up that is not counted. Latency is per record, produce() to its delivery report
   (time.perf_counter); records are sent on schedule even after a stall, so a stall shows in
   every record it delayed. Beside it, Herald's CPU over its window and how long its threads
   waited for a CPU (/proc/PID/task/*/schedstat): a wait well above zero says the machine, not
   Herald, set that window's latency.
5. **Consume latency.** A producer writes 1,000 records/s straight to the broker, each carrying
   its send time; two librdkafka consumers read them at the same time, one straight from the
   broker, one through Herald. Latency is end to end, produce() to the consumer's poll()
   returning the record (both ends in this process, one clock): a Fetch held back by a stalled
   proxy shows in it, where the consumer's own fetch round trip would hide it behind the
   broker's long-poll wait.

Latencies are p50, p99, p999 and max in ms; "added" is Herald minus direct at each
percentile. The targets, judged at the largest N and printed as met / NOT MET: added p99 at
most 1 ms and added p999 at most 5 ms, for the producer and for the consumer; RSS at most
40 KiB per held connection; every connection asked for still held. The exit status is 1 when a
target is missed.

Layout: with two CPUs or more, this script, the broker and every client run on CPU 0 and
Herald on CPU 1 (bench/pinning.py), every thread checked before each measured window;
`--unpinned` leaves everything on every core. The soft limit on open files is raised to the
hard one for this process, the broker and Herald. Herald needs two descriptors per held
connection (its client socket and its upstream one) plus some for itself, so N held
connections need a hard limit above 2N + 128. An N the hard limit cannot hold is refused up
front with the largest one it can; `--past-fd-limit` runs it anyway, to see what Herald does
when it runs out of descriptors (its log, counted by event, is printed after each step).
Herald's `limits.max_connections` is raised to the largest N plus room for the live clients,
and both idle timeouts (Herald's `limits.idle_timeout_s`, the broker's
`connections.max.idle.ms`) to an hour: a real idle client refreshes its metadata every few
minutes, while a held connection here must outlive the whole run.

With `--gc-stats`, the lines of Herald's /metrics that describe its garbage collector
(`herald_gc_*`, `python_gc_*`) and changed over each step's Herald produce window are printed
with their values before and after, when Herald exposes any; otherwise the script says there
are none.

What Herald logs during a step (warnings and errors, counted by event and reason) is printed
after it.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import re
import resource
import socket
import struct
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trio  # noqa: E402
from confluent_kafka import OFFSET_END, Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.bench_proxy import CpuClock, data_bytes, data_dir, log  # noqa: E402
from bench.pinning import (  # noqa: E402
    PROXY_CPU,
    RunQueueWait,
    can_pin,
    pin,
    pin_self_to_load_cpu,
    verify_tree,
)
from protocol.framing import FrameDecoder  # noqa: E402
from protocol.messages.api_versions_request import ApiVersionsRequest  # noqa: E402
from protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic  # noqa: E402
from protocol.messages.produce_request import (  # noqa: E402
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from protocol.messages.produce_response import ProduceResponse  # noqa: E402
from protocol.records import Record, build_batch  # noqa: E402
from proxy.devtools.embedded_kafka import KafkaCluster, free_port  # noqa: E402
from tests.support import raw_client as raw  # noqa: E402
from tests.support.herald_process import HeraldProcess, shipped_config  # noqa: E402

TARGET_ADDED_P99_MS = 1.0
TARGET_ADDED_P999_MS = 5.0
TARGET_RSS_KIB = 40.0

RATE = 1000  # records per second of the live producer
RECORD = 1024
WARMUP_S = 2.0
OPEN_AT_ONCE = 64  # held connections being opened at the same time
FDS_PER_HELD = 2  # Herald's client socket and its upstream socket
FDS_KEPT = 128  # Herald's listeners, admin endpoint, own broker connections, live clients
LIVE_CONNECTIONS = 64  # room above N in max_connections for the live clients
HOUR_S = 3600
_API_VERSIONS = ApiVersionsRequest(client_software_name="bench-idle", client_software_version="1")

BUDGET_USED = 'herald_memory_budget_bytes{kind="used"} '
GC_METRIC = re.compile(r"^(?:python_gc|herald_gc|\w*_gc_)\w*(?:\{[^}]*\})? ")
"""Lines of Herald's /metrics about its garbage collector, whatever their exact names."""


# --- latency -------------------------------------------------------------------------------


@dataclass
class Latency:
    """Percentiles in ms of one window; `count` records timed, `errors` failed or missing."""

    count: int = 0
    p50: float = math.nan
    p99: float = math.nan
    p999: float = math.nan
    max: float = math.nan
    errors: list[str] = field(default_factory=list)


def percentiles(seconds: list[float], errors: list[str]) -> Latency:
    """Nearest-rank percentiles (the value at rank ceil(q * n)): no interpolation that would
    pull a lone stall towards its neighbours."""
    if not seconds:
        return Latency(errors=errors or ["no record timed"])
    ordered = sorted(seconds)

    def rank(q: float) -> float:
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)] * 1000

    return Latency(len(ordered), rank(0.50), rank(0.99), rank(0.999), ordered[-1] * 1000,
                   errors)


def traceparent() -> bytes:
    return f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01".encode()


def paced(rate: int, seconds: float, send: Callable[[], None],
          wait: Callable[[float], object]) -> None:
    """Call `send()` `rate` times a second for `seconds`, on a fixed schedule: after a stall
    the records due are sent at once, so a stall delays every record due during it (no
    coordinated omission). Between sends, `wait(timeout)` serves delivery reports; records
    due within the same millisecond may leave together."""
    interval = 1.0 / rate
    next_at = time.perf_counter()
    end = next_at + seconds
    while True:
        now = time.perf_counter()
        if now >= end:
            return
        while next_at <= now:
            send()
            next_at += interval
        # At least 1 ms: librdkafka's poll() counts whole milliseconds, so a shorter wait
        # returns at once and the loop would spin, taking the load CPU from the broker.
        wait(max(0.001, min(next_at - time.perf_counter(), 0.005)))


def timed_produce(bootstrap: str, topic: str, seconds: float) -> Latency:
    """Per-record latency, produce() to delivery report, of a librdkafka producer at RATE
    records/s (acks=all, linger.ms=0, 1 KiB, traced); the first WARMUP_S not counted."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "client.id": "bench-live-producer"})
    value = os.urandom(RECORD)
    took: list[float] = []
    errors: list[str] = []
    measured_from = time.perf_counter() + WARMUP_S

    def delivered(sent: float, err: object, _msg: object) -> None:
        now = time.perf_counter()
        if err is not None:
            errors.append(str(err))
        elif sent >= measured_from:
            took.append(now - sent)

    def send() -> None:
        sent = time.perf_counter()
        while True:
            try:
                producer.produce(topic, value, headers=[("traceparent", traceparent())],
                                 on_delivery=partial(delivered, sent))
                return
            except BufferError:
                producer.poll(0.001)

    paced(RATE, WARMUP_S + seconds, send, producer.poll)
    left = producer.flush(30)
    if left:
        errors.append(f"{left} records not delivered 30 s after the end")
    return percentiles(took, errors)


class TimedConsumer:
    """A librdkafka consumer in a thread of its own, timing each record from the send time
    it carries (perf_counter_ns in its first 8 bytes) to poll() returning it."""

    def __init__(self, bootstrap: str, topic: str, name: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{name}",
                                  "enable.auto.commit": False, "client.id": f"bench-{name}"})
        self.consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
        self.took: list[float] = []
        self.errors: list[str] = []
        self.measured_from_ns = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                first = self.consumer.poll(0.1)  # returns as soon as a record is there
                ready = [] if first is None else [first, *self.consumer.consume(500, 0)]
                now = time.perf_counter_ns()
                for msg in ready:
                    if msg.error():
                        self.errors.append(str(msg.error()))
                        continue
                    sent = struct.unpack_from(">q", msg.value())[0]
                    if self.measured_from_ns and sent >= self.measured_from_ns:
                        self.took.append((now - sent) / 1e9)
        finally:
            self.consumer.close()

    def finish(self) -> Latency:
        self.stop.set()
        self.thread.join(60)
        return percentiles(self.took, self.errors)


def timed_consume(broker: str, herald: str, topic: str, seconds: float) -> dict[str, Latency]:
    """End-to-end latency of records produced straight to the broker at RATE records/s,
    read at the same time by a consumer straight from the broker and one through Herald."""
    consumers = {"direct": TimedConsumer(broker, topic, f"direct-{uuid.uuid4().hex[:6]}"),
                 "herald": TimedConsumer(herald, topic, f"herald-{uuid.uuid4().hex[:6]}")}
    time.sleep(1.5)  # both have looked up the end offset and wait in a Fetch
    producer = Producer({"bootstrap.servers": broker, "acks": "all", "linger.ms": 0})
    pad = os.urandom(RECORD - 8)
    measured_from = time.perf_counter_ns() + int(WARMUP_S * 1e9)
    for c in consumers.values():
        c.measured_from_ns = measured_from
    sent = [0]

    def send() -> None:
        stamp = time.perf_counter_ns()
        producer.produce(topic, struct.pack(">q", stamp) + pad,
                         headers=[("traceparent", traceparent())])
        if stamp >= measured_from:
            sent[0] += 1

    paced(RATE, WARMUP_S + seconds, send, producer.poll)
    producer.flush(30)
    time.sleep(1.0)  # the last records reach both consumers
    results = {name: c.finish() for name, c in consumers.items()}
    for result in results.values():
        if result.count < sent[0]:
            result.errors.append(f"{sent[0] - result.count} of {sent[0]} records not consumed")
    return results


# --- held connections ----------------------------------------------------------------------


def source_address(index: int) -> str:
    """127.0.0.2, 127.0.0.3, ...: each a client address of its own to Herald."""
    return str(ipaddress.IPv4Address("127.0.0.2") + index)


class HeldConnections:
    """Client connections that did real work through Herald and now sit open and silent.

    The sockets are plain stdlib ones, so they stay open between the trio runs that open them;
    `per_source` of them come from each loopback source address."""

    def __init__(self, bootstrap: str, topic: str, per_source: int) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.address = (host, int(port))
        self.topic = topic
        self.per_source = per_source
        self.sockets: list[socket.socket] = []
        self.failures: Counter[str] = Counter()

    def grow_to(self, n: int) -> None:
        """Open connections until `n` are held (failed ones are counted, not retried)."""
        wanted = n - len(self.sockets)
        if wanted > 0:
            trio.run(self._open_many, len(self.sockets), wanted)

    async def _open_many(self, first: int, count: int) -> None:
        limiter = trio.CapacityLimiter(OPEN_AT_ONCE)
        async with trio.open_nursery() as nursery:
            for i in range(first, first + count):
                nursery.start_soon(self._open_one, i, limiter)

    async def _open_one(self, i: int, limiter: trio.CapacityLimiter) -> None:
        async with limiter:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.setblocking(False)
                sock.bind((source_address(i // self.per_source), 0))
                with trio.fail_after(60):
                    await self._work(sock, f"idle-{i}")
            except (OSError, trio.TooSlowError, RuntimeError) as exc:
                sock.close()
                self.failures[f"{type(exc).__name__}: {exc}"] += 1
                return
            self.sockets.append(sock)

    async def _work(self, sock: socket.socket, client_id: str) -> None:
        """ApiVersions, Metadata, one traced Produce (acks=all), each answered."""
        tsock = trio.socket.from_stdlib_socket(sock)
        await tsock.connect(self.address)
        decoder = FrameDecoder()
        pending: list[bytes] = []

        async def ask(frame: bytes, what: str) -> bytes:
            await _send_all(tsock, frame)
            while not pending:
                data = await tsock.recv(65536)
                if not data:
                    raise RuntimeError(f"Herald closed the connection before answering {what}")
                decoder.feed(data)
                pending.extend(decoder.frames())
            return pending.pop(0)

        answer = await ask(raw.request_frame(18, 3, 1, _API_VERSIONS, client_id), "ApiVersions")
        error = struct.unpack_from(">h", answer, 4)[0]
        if error:
            raise RuntimeError(f"ApiVersions answered error {error}")
        await ask(raw.request_frame(3, 12, 2, _metadata(self.topic), client_id), "Metadata")
        answer = await ask(raw.request_frame(0, 9, 3, self._produce(), client_id), "Produce")
        error = _produce_error(answer)
        if error:
            raise RuntimeError(f"Produce answered error {error}")

    def _produce(self) -> ProduceRequest:
        batch = build_batch([Record(value=b"held", headers=[("traceparent", traceparent())])])
        return ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[TopicProduceData(
            name=self.topic, partition_data=[PartitionProduceData(index=0, records=batch)])])

    def still_open(self) -> int:
        """How many held sockets the other side has not closed (nothing is ever sent to
        them, so a readable socket means end of stream or reset)."""
        open_ = 0
        for sock in self.sockets:
            try:
                if sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                    open_ += 1  # unexpected bytes, but open
            except BlockingIOError:
                open_ += 1
            except OSError:
                pass
        return open_

    def sources(self) -> int:
        return math.ceil(len(self.sockets) / self.per_source) if self.sockets else 0

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()
        self.sockets.clear()


async def _send_all(tsock: trio.socket.SocketType, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[await tsock.send(view):]


def _metadata(topic: str) -> MetadataRequest:
    return MetadataRequest(topics=[MetadataRequestTopic(name=topic)])


def _produce_error(payload: bytes) -> int:
    # Response header v1: the correlation id, then an (empty) tagged-field section.
    msg = ProduceResponse.decode(payload, 9, 5)
    return msg.responses[0].partition_responses[0].error_code


# --- Herald's process ----------------------------------------------------------------------


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def fd_limit(pid: int) -> tuple[int, int]:
    """(soft, hard) limit on open files of `pid`."""
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return int(soft), int(hard)
    raise RuntimeError(f"no open-files limit for process {pid}")


def idle_millicores(pid: int, seconds: float) -> float:
    clock = CpuClock(pid)
    before, started = sum(clock.read()), time.monotonic()
    time.sleep(seconds)
    return (sum(clock.read()) - before) / (time.monotonic() - started) * 1000


class Busy:
    """Herald's CPU (millicores) and its threads' wait for a CPU (ms per second: time runnable
    but not running, which on a quiet machine with Herald on a core of its own stays near
    zero) since it was made. A window in which Herald waited is a window of the machine,
    not of Herald."""

    def __init__(self, pid: int) -> None:
        self.clock = CpuClock(pid)
        self.cpu = sum(self.clock.read())
        self.wait = RunQueueWait([pid])
        self.started = time.monotonic()

    def read(self) -> tuple[float, float]:
        elapsed = time.monotonic() - self.started
        return ((sum(self.clock.read()) - self.cpu) / elapsed * 1000,
                self.wait.seconds() / elapsed * 1000)


def raise_own_fd_limit() -> tuple[int, int]:
    """Soft limit to the hard one, for this process and everything it starts."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def metrics_text(admin_url: str) -> str:
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=10) as answer:
        return answer.read().decode()


def gc_lines(admin_url: str) -> list[str]:
    return [line for line in metrics_text(admin_url).splitlines() if GC_METRIC.match(line)]


def budget_used(admin_url: str) -> float:
    """Bytes of Herald's memory budget (`limits.memory_budget_bytes`) booked now: what its
    sessions hold for their buffers, which reads must find room in. NaN if not exposed."""
    for line in metrics_text(admin_url).splitlines():
        if line.startswith(BUDGET_USED):
            return float(line.rsplit(" ", 1)[1])
    return math.nan


_EVENT = re.compile(r'level=(\w+) event=(\S+)(?: reason=("[^"]*"|\S+))?')


class LogTail:
    """Herald's log lines written since the last look, counted by what they say: an event
    line by its level, event and reason, any other line (a library's message) by its text;
    the lines of a traceback are left out."""

    def __init__(self, herald: HeraldProcess) -> None:
        self.herald = herald
        self.seen = 0

    def new(self) -> Counter[str]:
        text = self.herald.logs()
        lines = text[self.seen:].splitlines()
        self.seen = len(text)
        kinds: Counter[str] = Counter()
        for line in lines:
            if not line.strip() or line.startswith((" ", "Traceback")):
                continue
            event = _EVENT.search(line)
            if event:
                level, name, reason = event.groups()
                kinds[f"{level} {name}" + (f" reason={reason}" if reason else "")] += 1
            else:
                kinds[line[:200]] += 1
        return kinds


# --- the run -------------------------------------------------------------------------------


@dataclass
class Step:
    n: int
    held: int = 0
    sources: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    rss_before: int = 0
    rss_after: int = 0
    added: int = 0
    fds: int = 0
    idle_mc: float = math.nan
    produce: dict[str, Latency] = field(default_factory=dict)
    consume: dict[str, Latency] = field(default_factory=dict)
    logged: Counter[str] = field(default_factory=Counter)
    budget: float = math.nan  # bytes of Herald's memory budget booked with N held, idle
    produce_mc: float = math.nan  # Herald's CPU during its produce window
    waited_ms_per_s: float = math.nan  # Herald's wait for a CPU during that window

    @property
    def rss_per_conn_kib(self) -> float:
        return (self.rss_after - self.rss_before) / self.added / 1024 if self.added else math.nan


def create_topics(broker: str, names: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": broker, "log_level": 3})
    futures = admin.create_topics([NewTopic(t, 1, 1) for t in names])
    for name, future in futures.items():
        try:
            future.result(30)
        except KafkaException as exc:
            raise RuntimeError(f"creating topic {name}: {exc}") from exc


def run(args: argparse.Namespace, counts: list[int], workdir: Path, pinned: bool
        ) -> list[Step]:
    extra = {"connections.max.idle.ms": str(HOUR_S * 1000)}
    with KafkaCluster(size=1, workdir=workdir, extra_properties=extra) as cluster:
        config = shipped_config(cluster.bootstrap)
        config["admin"]["bind"] = f"127.0.0.1:{free_port()}"
        config["limits"].update(max_connections=max(counts) + LIVE_CONNECTIONS,
                                idle_timeout_s=HOUR_S)
        per_source = config["limits"]["max_connections_per_source"]
        if args.per_source > per_source:
            raise SystemExit(f"--per-source {args.per_source} is above Herald's "
                             f"limits.max_connections_per_source ({per_source})")
        log(f"chain: {[m['type'] for m in config['interceptors']['produce']]}")
        with HeraldProcess(config) as herald:
            assert herald.process is not None
            pid = herald.process.pid
            if pinned:
                pin(pid, {PROXY_CPU})
            soft, hard = fd_limit(pid)
            log(f"broker {cluster.bootstrap}, Herald {herald.bootstrap} (pid {pid}), "
                f"Herald's open-files limit {soft}/{hard}")
            need = FDS_PER_HELD * max(counts) + FDS_KEPT
            if soft < need:
                log(f"WARNING: Herald may open {soft} files; holding {max(counts)} connections "
                    f"needs about {need} ({FDS_PER_HELD} per connection + {FDS_KEPT}): this "
                    "run shows what Herald does at its limit.")
            tag = uuid.uuid4().hex[:6]
            held_topic = f"bench-idle-held-{tag}"
            create_topics(cluster.bootstrap, [held_topic])
            held = HeldConnections(herald.bootstrap, held_topic, args.per_source)
            if args.warmup_seconds > 0:
                warm_up(cluster.bootstrap, herald.bootstrap, f"bench-idle-warm-{tag}",
                        args.warmup_seconds)
            logs = LogTail(herald)
            logs.new()  # the start-up and warm-up lines
            steps = []
            try:
                for index, n in enumerate(counts):
                    steps.append(measure_step(index, n, args, cluster, herald, held, logs,
                                              pinned, tag))
                    if herald.process.poll() is not None:
                        raise RuntimeError(f"Herald exited:\n{herald.logs()[-3000:]}")
            finally:
                # The broker closes its ends first: closed from this side, Herald would close
                # its thousands of upstream sockets itself, and each would hold its loopback
                # port in TIME_WAIT for a minute, too many for the next run to find free ports.
                cluster.stop()
                held.close()
    return steps


def warm_up(broker: str, herald: str, topic: str, seconds: float) -> None:
    """Each live client for `seconds`, not measured. A fresh broker JVM answers in seconds at
    first and in milliseconds once compiled: measured, that would penalise whichever window
    came first."""
    log(f"warm-up: {seconds:.0f} s of each live client, not measured")
    create_topics(broker, [topic])
    for target in (broker, herald):
        timed_produce(target, topic, seconds)
    timed_consume(broker, herald, topic, seconds)


def measure_step(index: int, n: int, args: argparse.Namespace, cluster: KafkaCluster,
                 herald: HeraldProcess, held: HeldConnections, logs: LogTail, pinned: bool,
                 tag: str) -> Step:
    assert herald.process is not None
    pid = herald.process.pid
    broker = cluster.bootstrap
    load_pids = [os.getpid(), *(node.process.pid for node in cluster.nodes if node.process)]
    step = Step(n)
    log(f"\n== N = {n}: opening {max(0, n - len(held.sockets))} more connections")
    step.rss_before = rss_bytes(pid)
    before_count, failed_before = len(held.sockets), Counter(held.failures)
    started = time.monotonic()
    held.grow_to(n)
    step.added = len(held.sockets) - before_count
    time.sleep(1.0)  # let Herald finish whatever the last answers left it to do
    step.rss_after = rss_bytes(pid)
    step.failures = held.failures - failed_before
    step.held = held.still_open()
    step.sources = held.sources()
    step.fds = open_fds(pid)
    step.budget = budget_used(herald.admin_url)
    log(f"   {step.added} opened in {time.monotonic() - started:.1f} s from {step.sources} "
        f"source address(es); {step.held} of {n} held open; Herald RSS "
        f"{step.rss_before / 2**20:.1f} -> {step.rss_after / 2**20:.1f} MiB, {step.fds} fds, "
        f"memory budget booked {step.budget / 2**20:.0f} MiB")
    for reason, count in step.failures.most_common():
        log(f"   FAILED {count}x: {reason}")

    if pinned:
        verify_tree([pid])
    step.idle_mc = idle_millicores(pid, args.idle_seconds)
    log(f"   idle: {step.idle_mc:.1f} millicores over {args.idle_seconds:.0f} s")

    topics = {t: f"bench-idle-{t}-{n}-{tag}" for t in ("direct", "herald", "consume")}
    create_topics(broker, list(topics.values()))
    targets = {"direct": broker, "herald": herald.bootstrap}
    order = ["direct", "herald"] if index % 2 == 0 else ["herald", "direct"]
    for name in order:
        if pinned:
            verify_tree([pid])
        gc_before = gc_lines(herald.admin_url) if args.gc_stats and name == "herald" else []
        busy = Busy(pid)
        load = RunQueueWait(load_pids)
        started = time.monotonic()
        step.produce[name] = timed_produce(targets[name], topics[name], args.seconds)
        load_wait = load.seconds() / (time.monotonic() - started) * 1000
        log(f"   produce {name:6}: {fmt(step.produce[name])}")
        log(f"                   broker and clients waited {load_wait:.0f} ms/s for a CPU "
            "(summed over their threads)")
        if name == "herald":
            step.produce_mc, step.waited_ms_per_s = busy.read()
            log(f"                   Herald: {step.produce_mc:.0f} millicores, waited "
                f"{step.waited_ms_per_s:.0f} ms/s for a CPU")
        if args.gc_stats and name == "herald":
            show_gc(gc_before, gc_lines(herald.admin_url))
    if pinned:
        verify_tree([pid])
    step.consume = timed_consume(broker, herald.bootstrap, topics["consume"], args.seconds)
    for name in ("direct", "herald"):
        log(f"   consume {name:6}: {fmt(step.consume[name])}")
    step.held = held.still_open()
    log(f"   {step.held} of {n} still held open after the step")
    step.logged = logs.new()
    if step.logged:
        log("   Herald logged during the step (count: line, tracebacks left out):")
        for kind, count in step.logged.most_common(12):
            log(f"     {count:6}: {kind}")
    return step


def show_gc(before: list[str], after: list[str]) -> None:
    if not before and not after:
        log("   gc stats: Herald's /metrics has none")
        return
    values = dict(_metric(line) for line in before)
    changed = [(name, values.get(name, math.nan), value)
               for name, value in map(_metric, after)
               if not name.split("{")[0].endswith("_created") and value != values.get(name)]
    log(f"   gc stats that changed over the Herald produce window: {len(changed)}"
        f" of {len(after)}")
    for name, old, new in changed:
        log(f"     {name} {old:g} -> {new:g}")


def _metric(line: str) -> tuple[str, float]:
    name, value = line.rsplit(" ", 1)
    return name, float(value)


def fmt(lat: Latency) -> str:
    text = (f"{lat.count} timed, p50 {lat.p50:.2f} p99 {lat.p99:.2f} p999 {lat.p999:.2f} "
            f"max {lat.max:.2f} ms")
    if lat.errors:
        text += f"; {len(lat.errors)} error(s), first: {lat.errors[0]}"
    return text


# --- the report ----------------------------------------------------------------------------


def report(steps: list[Step], args: argparse.Namespace, pinned: bool) -> bool:
    layout = ("pinned: broker, clients and this script on CPU 0, Herald on CPU 1" if pinned
              else "unpinned")
    print(f"\nHerald ([trace_context, audit], shipped config) holding N idle connections; "
          f"live clients at {RATE} records/s x {RECORD} B, acks=all, {args.seconds:.0f} s "
          f"per window ({layout})")
    for kind, title in (("produce", "produce latency, produce() to delivery report (ms)"),
                        ("consume", "consume latency, produce() to poll() end to end (ms)")):
        print(f"\n{title}")
        print(f"{'N':>6} {'held':>6} | {'direct p50':>10} {'p99':>7} {'p999':>7} {'max':>7} | "
              f"{'herald p50':>10} {'p99':>7} {'p999':>7} {'max':>7} | "
              f"{'added p50':>9} {'p99':>7} {'p999':>7}")
        for s in steps:
            d, h = getattr(s, kind)["direct"], getattr(s, kind)["herald"]
            print(f"{s.n:>6} {s.held:>6} | {d.p50:10.2f} {d.p99:7.2f} {d.p999:7.2f} "
                  f"{d.max:7.2f} | {h.p50:10.2f} {h.p99:7.2f} {h.p999:7.2f} {h.max:7.2f} | "
                  f"{h.p50 - d.p50:+9.2f} {h.p99 - d.p99:+7.2f} {h.p999 - d.p999:+7.2f}")
    print("\nHerald's memory and CPU")
    print(f"{'N':>6} {'held':>6} {'sources':>7} {'added':>6} {'RSS MiB':>8} {'RSS/conn KiB':>12} "
          f"{'fds':>6} {'budget MiB':>10} {'idle millicores':>15} {'produce millicores':>18} "
          f"{'CPU wait ms/s':>13}")
    for s in steps:
        print(f"{s.n:>6} {s.held:>6} {s.sources:>7} {s.added:>6} {s.rss_after / 2**20:8.1f} "
              f"{s.rss_per_conn_kib:12.1f} {s.fds:>6} {s.budget / 2**20:10.0f} "
              f"{s.idle_mc:15.1f} {s.produce_mc:18.0f} {s.waited_ms_per_s:13.0f}")
    print("(budget: Herald's memory budget booked with N held and idle; produce millicores, "
          "CPU wait: Herald during its produce window, a wait well above zero means the "
          "machine was not quiet and the latencies are the machine's)")
    errors = [(s.n, kind, name, lat.errors) for s in steps for kind in ("produce", "consume")
              for name, lat in getattr(s, kind).items() if lat.errors]
    for n, kind, name, errs in errors:
        print(f"N={n} {kind} {name}: {len(errs)} error(s): {'; '.join(errs[:3])}")

    last = steps[-1]
    verdicts = [(f"all {last.n} connections held", last.held == last.n,
                 f"{last.held} held")]
    for kind in ("produce", "consume"):
        d, h = getattr(last, kind)["direct"], getattr(last, kind)["herald"]
        verdicts += [
            (f"{kind}: added p99 <= {TARGET_ADDED_P99_MS:g} ms at N={last.n}",
             h.p99 - d.p99 <= TARGET_ADDED_P99_MS, f"{h.p99 - d.p99:+.2f} ms"),
            (f"{kind}: added p999 <= {TARGET_ADDED_P999_MS:g} ms at N={last.n}",
             h.p999 - d.p999 <= TARGET_ADDED_P999_MS, f"{h.p999 - d.p999:+.2f} ms"),
        ]
    if last.added:
        verdicts.append((f"RSS <= {TARGET_RSS_KIB:g} KiB per connection at N={last.n}",
                         last.rss_per_conn_kib <= TARGET_RSS_KIB,
                         f"{last.rss_per_conn_kib:.1f} KiB"))
    print()
    for label, met, value in verdicts:  # NaN compares false: a window with no figure fails
        print(f"[{'met' if met else 'NOT MET':7}] {label}: {value}")
    return all(met for _, met, _ in verdicts)


def parse_counts(text: str) -> list[int]:
    try:
        counts = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not counts or counts[0] < 0:
        raise argparse.ArgumentTypeError(f"need one or more counts >= 0, got {text!r}")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=parse_counts, default=[0, 1000, 4000, 10000],
                        help="comma-separated counts of held connections, each measured "
                             "(default 0,1000,4000,10000)")
    parser.add_argument("--seconds", type=float, default=30.0,
                        help="measured length of each latency window (plus 2 s of warm-up)")
    parser.add_argument("--warmup-seconds", type=float, default=15.0,
                        help="unmeasured run of each live client before the first step")
    parser.add_argument("--idle-seconds", type=float, default=10.0,
                        help="window of the idle CPU figure")
    parser.add_argument("--per-source", type=int, default=500,
                        help="held connections per loopback source address")
    parser.add_argument("--gc-stats", action="store_true",
                        help="print Herald's garbage collector metrics, if it exposes any")
    parser.add_argument("--past-fd-limit", action="store_true",
                        help="go on when the open-files limit is too low for the largest N")
    parser.add_argument("--unpinned", action="store_true",
                        help="leave every process on every core")
    parser.add_argument("--data-dir", default=None,
                        help="folder for the broker's log (default: a folder in /dev/shm)")
    args = parser.parse_args(argv)
    if args.per_source < 1:
        parser.error("--per-source must be at least 1")
    counts = args.connections

    soft, hard = raise_own_fd_limit()
    log(f"open-files limit {soft}/{hard} for this process, the broker and Herald")
    holdable = (hard - FDS_KEPT) // FDS_PER_HELD
    if max(counts) > holdable and not args.past_fd_limit:
        parser.error(
            f"the open-files hard limit is {hard}: Herald can hold about {holdable} "
            f"connections ({FDS_PER_HELD} descriptors each, {FDS_KEPT} kept for itself), not "
            f"{max(counts)}. Raise the hard limit (ulimit -Hn, LimitNOFILE=) or ask for fewer; "
            "--past-fd-limit runs anyway, to see what Herald does at its limit")
    pinned = not args.unpinned and can_pin()
    if pinned:
        pin_self_to_load_cpu()  # the broker and every client thread inherit CPU 0
    started = time.monotonic()
    records = len(counts) * 3 * RATE * (args.seconds + WARMUP_S)
    with data_dir(args.data_dir, data_bytes(int(records), RECORD)) as workdir:
        log(f"starting a 1-broker Kafka cluster (data in {workdir}) ...")
        steps = run(args, counts, workdir, pinned)
    ok = report(steps, args, pinned)
    log(f"\nfinished in {time.monotonic() - started:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
