"""Real clients that keep writing and reading while a Herald in front of them dies or restarts,
and the books they keep: which records each delivery report acknowledged, which offsets a
consumer group read and committed, and every error a client surfaced.

Each client runs in its own thread (the Java producer in its own JVM) until told to stop; the
checks after the run compare those books with what the broker holds.
"""

from __future__ import annotations

import re
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.java_tools import CONSOLE_CONSUMER, CONSOLE_PRODUCER, tool_command


def herald_with_admin(upstream: str, **overrides: Any) -> HeraldProcess:
    """A Herald on its own block of ports, its admin endpoint on the block's last port. Starting
    it again after it died reuses the same ports, as a kubelet restarting the container does."""
    config = herald_config(upstream, **overrides)
    config["admin"] = {"bind": f"127.0.0.1:{config['listen']['broker_port_base'] + 15}"}
    return HeraldProcess(config)


def client_connections(herald: HeraldProcess) -> float:
    """How many client connections the Herald holds now (its own gauge)."""
    text = urllib.request.urlopen(f"{herald.admin_url}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith('herald_connections_active{side="client"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def wait_for(check: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(0.2)


@dataclass
class ClientErrors:
    """Every error a librdkafka client surfaced through its error callback: retriable ones
    (a broker connection lost, all brokers down for a moment) and the rest."""

    seen: list[KafkaError] = field(default_factory=list)

    def __call__(self, err: KafkaError) -> None:
        self.seen.append(err)

    def fatal(self) -> list[str]:
        """The error callback gets a fatal error as the code _FATAL, its flag not set."""
        return [str(e) for e in self.seen if e.fatal() or e.code() == KafkaError._FATAL]

    def counts(self) -> dict[str, int]:
        return dict(Counter(e.name() for e in self.seen))

    def beyond_connection_loss(self) -> list[str]:
        """Errors other than a lost connection or all brokers down for a while: what a client
        restarting Herald must never see."""
        benign = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}
        return [str(e) for e in self.seen if e.code() not in benign]


class IdempotentProducer(threading.Thread):
    """An idempotent librdkafka producer (acks=all, otherwise librdkafka's defaults: retries
    without limit until `message.timeout.ms`, reconnect backoff 100 ms to 10 s) writing
    numbered records, a few hundred a second, until stopped; then it flushes."""

    def __init__(self, bootstrap: str, topic: str, tag: str = "lib",
                 headers: Callable[[int], list[tuple[str, bytes]]] | None = None) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.tag = bootstrap, topic, tag
        self.headers = headers or (lambda _n: [])
        self.acked: list[bytes] = []
        self.failed: list[tuple[bytes, str]] = []
        self.errors = ClientErrors()
        self.sent = 0
        self.left = -1
        self.exception: str | None = None
        self.budget: int | None = None  # write no more than this many records, when set
        self._stop_event = threading.Event()

    def report(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            self.acked.append(msg.value())
        else:
            self.failed.append((msg.value(), str(err)))

    def run(self) -> None:
        try:
            producer = Producer({"bootstrap.servers": self.bootstrap,
                                 "enable.idempotence": True, "acks": "all",
                                 "linger.ms": 5, "error_cb": self.errors})
            n = 0
            while True:
                if self._stop_event.is_set() or self.errors.fatal():
                    break
                if self.budget is not None and n >= self.budget:
                    producer.poll(0.05)
                    continue
                producer.produce(self.topic, key=f"k{n % 17}".encode(),
                                 value=f"{self.tag}-{n}".encode(), headers=self.headers(n),
                                 on_delivery=self.report)
                self.sent += 1
                n += 1
                producer.poll(0.004)
        except KafkaException as exc:  # a fatal error: produce() and poll() refuse from now
            if not exc.args[0].fatal():
                self.exception = repr(exc)
                return
            self.errors(exc.args[0])
        except Exception as exc:  # shown by the test's assertion
            self.exception = repr(exc)
            return
        try:
            self.left = producer.flush(180)
        except KafkaException as exc:
            if not exc.args[0].fatal():
                self.exception = repr(exc)

    def finish(self) -> None:
        self._stop_event.set()
        self.join(240)
        assert not self.is_alive(), "the librdkafka producer did not finish"
        assert self.exception is None, self.exception


class JavaProducer:
    """Kafka's console producer (the Java client), configured as a Java application's producer
    is by default: idempotent, acks=all, retries until `delivery.timeout.ms` (the console tool
    alone retries 3 times, hence the explicit retry count). Fed numbered records through its
    standard input until stopped. It reports no per-record acknowledgement: a clean exit with
    no send error means every record was acknowledged."""

    def __init__(self, bootstrap: str, topic: str, tag: str = "java",
                 headers: Callable[[int], str] | None = None) -> None:
        """`headers`: the record's headers as the tool reads them (`k:v,k2:v2`)."""
        self.tag = tag
        self.headers = headers
        self.sent = 0
        self.budget: int | None = None  # write no more than this many records, when set
        self._err = tempfile.TemporaryFile()
        parse = ["--reader-property", "parse.headers=true"] if headers else []
        self.process = subprocess.Popen(
            tool_command(CONSOLE_PRODUCER, "--bootstrap-server", bootstrap, "--topic", topic,
                         *parse,
                         "--producer-property", "enable.idempotence=true",
                         "--producer-property", "acks=all",
                         "--producer-property", "linger.ms=5",
                         "--message-send-max-retries", "2147483647"),
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._err)
        self._stop_event = threading.Event()
        self._feeder = threading.Thread(target=self._feed, daemon=True)
        self._feeder.start()
        self.returncode: int | None = None
        self.stderr = ""

    def _feed(self) -> None:
        assert self.process.stdin is not None
        n = 0
        while not self._stop_event.is_set():
            if self.budget is not None and n >= self.budget:
                time.sleep(0.05)
                continue
            heads = f"{self.headers(n)}\t" if self.headers else ""
            self.process.stdin.write(f"{heads}{self.tag}-{n}\n".encode())
            n += 1
            self.process.stdin.flush()
            self.sent += 1
            time.sleep(0.008)
        self.process.stdin.close()

    def values(self) -> list[bytes]:
        return [f"{self.tag}-{n}".encode() for n in range(self.sent)]

    def finish(self) -> None:
        self._stop_event.set()
        self._feeder.join(30)
        try:
            self.returncode = self.process.wait(timeout=240)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self._err.seek(0)
            self.stderr = self._err.read().decode(errors="replace")
            self._err.close()


class GroupLog:
    """What the members of one consumer group read and committed, in the order it happened."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, int, int]] = []  # ("read" | "commit", partition, offset)

    def add(self, kind: str, items: list[tuple[int, int]]) -> None:
        with self.lock:
            self.events.extend((kind, p, o) for p, o in items)

    def check(self, ends: dict[int, int]) -> dict[str, int]:
        """Every offset below each partition's end was read; an offset read again was not yet
        covered by a successful commit when it was read again (the at-least-once window);
        returns the figures: records read, read again, offsets committed."""
        committed: dict[int, int] = {}
        read: dict[int, set[int]] = {}
        again = commits = 0
        for kind, p, o in self.events:
            if kind == "commit":
                committed[p] = max(committed.get(p, 0), o)
                commits += 1
                continue
            if o in read.setdefault(p, set()):
                assert o >= committed.get(p, 0), (
                    f"partition {p} offset {o} read again after its commit "
                    f"(committed up to {committed[p]})")
                again += 1
            read[p].add(o)
        for p, end in ends.items():
            missing = sorted(set(range(end)) - read.get(p, set()))
            assert not missing, f"partition {p}: offsets never read: {missing[:20]}"
        return {"read": sum(map(len, read.values())), "read_again": again,
                "committed": commits}


class GroupMember(threading.Thread):
    """A librdkafka consumer in a group, committing synchronously after each batch it read
    (auto commit off), until stopped. Errors a poll or a commit returned are kept apart from
    the connection errors its error callback saw."""

    def __init__(self, bootstrap: str, topic: str, group: str, log: GroupLog) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.group, self.log = bootstrap, topic, group, log
        self.errors = ClientErrors()
        self.poll_errors: list[str] = []
        self.commit_errors: list[KafkaError] = []
        self.values: list[bytes] = []
        self.exception: str | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                                 "enable.auto.commit": False,
                                 "auto.offset.reset": "earliest", "error_cb": self.errors})
            consumer.subscribe([self.topic])
            while not self._stop_event.is_set():
                batch = consumer.consume(200, 0.5)
                good = [m for m in batch if not m.error()]
                self.poll_errors += [str(m.error()) for m in batch if m.error()]
                if not good:
                    continue
                self.log.add("read", [(m.partition(), m.offset()) for m in good])
                self.values += [m.value() for m in good]
                offsets = [TopicPartition(self.topic, m.partition(), m.offset() + 1)
                           for m in good]
                try:
                    done = consumer.commit(offsets=offsets, asynchronous=False)
                except KafkaException as exc:
                    self.commit_errors.append(exc.args[0])
                    continue
                self.log.add("commit", [(tp.partition, tp.offset) for tp in done or []
                                        if tp.error is None])
            consumer.close()
        except Exception as exc:  # shown by the test's assertion
            self.exception = repr(exc)

    def finish(self) -> None:
        self._stop_event.set()
        self.join(120)
        assert not self.is_alive(), "a group member did not finish"
        assert self.exception is None, self.exception


class JavaGroupMember:
    """Kafka's console consumer (the Java client) as a member of the group, with the Java
    consumer's defaults (auto commit every 5 s, and on close). It prints each record's
    partition and offset, which go into the group's log as it reads them; its commits are
    not logged, so the group's check holds it to the librdkafka members' commits only."""

    def __init__(self, bootstrap: str, topic: str, group: str, log: GroupLog) -> None:
        self.log = log
        self.values: list[bytes] = []
        self.errors = ClientErrors()
        self.commit_errors: list[KafkaError] = []
        self._err = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            tool_command(CONSOLE_CONSUMER, "--bootstrap-server", bootstrap, "--topic", topic,
                         "--group", group,
                         "--formatter-property", "print.partition=true",
                         "--formatter-property", "print.offset=true"),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._err)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.stderr = ""

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            found = re.match(rb"Partition:(\d+)\s+Offset:(\d+)\s+(.*)", raw.rstrip(b"\n"))
            if found:
                self.log.add("read", [(int(found[1]), int(found[2]))])
                self.values.append(found[3])

    @property
    def poll_errors(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if "ERROR" in line]

    def finish(self) -> None:
        """SIGTERM, as a pod's stop: the consumer commits and leaves the group."""
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self._reader.join(10)
            self._err.seek(0)
            self.stderr = self._err.read().decode(errors="replace")
            self._err.close()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "restart-ends"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in partitions}
    finally:
        consumer.close()


def read_back(bootstrap: str, topic: str) -> Counter[bytes]:
    """Every record value of the topic, read by a fresh consumer straight from the broker,
    with how often each is there."""
    ends = end_offsets(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap,
                         "group.id": f"read-back-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p, end in ends.items() if end])
    found: Counter[bytes] = Counter()
    positions = dict.fromkeys(ends, 0)
    deadline = time.monotonic() + 120
    try:
        while any(positions[p] < end for p, end in ends.items()):
            assert time.monotonic() < deadline, f"read back {positions} of {ends}"
            for m in consumer.consume(500, 1.0):
                assert not m.error(), m.error()
                found[m.value()] += 1
                positions[m.partition()] = m.offset() + 1
    finally:
        consumer.close()
    return found


def exactly_once(found: Counter[bytes], acked: list[bytes],
                 unacked: list[bytes]) -> dict[str, int]:
    """Every acknowledged record is there once; an unacknowledged one at most once; nothing
    else is there. Returns the figures."""
    missing = [v for v in acked if found[v] == 0]
    twice = [v for v in acked + unacked if found[v] > 1]
    unknown = set(found) - set(acked) - set(unacked)
    assert not missing, f"{len(missing)} acknowledged records missing: {missing[:10]}"
    assert not twice, f"{len(twice)} records written twice: {twice[:10]}"
    assert not unknown, f"records nobody sent: {sorted(unknown)[:10]}"
    return {"acked": len(acked), "found": sum(found[v] for v in acked),
            "unacked_present": sum(found[v] for v in unacked), "duplicates": len(twice)}


class Traffic:
    """One topic, written by an idempotent librdkafka producer and the Java producer and read by
    a group of two librdkafka consumers, each client reaching Kafka through its own bootstrap
    (a gateway's addresses, or the client's own sidecar)."""

    def __init__(self, topic: str, lib: str, java: str, members: list[str]) -> None:
        self.topic = topic
        self.log = GroupLog()
        self.lib = IdempotentProducer(lib, topic)
        self.java = JavaProducer(java, topic)
        self.group = f"restart-{uuid.uuid4().hex[:8]}"
        self.members: list[GroupMember | JavaGroupMember] = []
        self.lib.start()
        for b in members:
            self.join(b)

    def join(self, bootstrap: str, java: bool = False) -> None:
        """A member joins the group (a librdkafka one, or the Java console consumer): the
        partitions are shared out again, and each goes on from the offset committed for it,
        whoever read it before."""
        if java:
            self.members.append(JavaGroupMember(bootstrap, self.topic, self.group, self.log))
            return
        member = GroupMember(bootstrap, self.topic, self.group, self.log)
        self.members.append(member)
        member.start()

    def wait_joined(self) -> None:
        """Until the newest member was given partitions and read from them: it started from
        the offsets the others committed (GroupLog.check proves none was read again)."""
        wait_for(lambda: bool(self.members[-1].values),
                 "the new member to be given partitions and read")

    def consumed(self, tag: str) -> int:
        return sum(1 for m in self.members for v in m.values if v.startswith(tag.encode()))

    def wait_flowing(self, what: str) -> None:
        """Until both producers' records have been acknowledged and read since the last call:
        every client is working (again)."""
        lib, java = len(self.lib.acked), self.consumed("java-")
        wait_for(lambda: len(self.lib.acked) >= lib + 100, f"librdkafka acks {what}")
        wait_for(lambda: self.consumed("java-") >= java + 50, f"Java records read {what}")

    def finish(self, upstream: str) -> dict[str, Any]:
        """Stop the producers, let the group read to the end, stop it; check everything and
        return the figures."""
        self.lib.finish()
        self.java.finish()
        ends = end_offsets(upstream, self.topic)
        wait_for(lambda: len(self.log.events) and all(
            any(k == "read" and p == q and o == end - 1 for k, p, o in self.log.events)
            for q, end in ends.items() if end), "the group to read to the end")
        for m in self.members:
            m.finish()
        assert self.lib.left == 0, f"{self.lib.left} records not flushed"
        assert self.java.returncode == 0, self.java.stderr[-3000:]
        assert "Error when sending message" not in self.java.stderr, self.java.stderr[-3000:]
        found = read_back(upstream, self.topic)
        figures = {
            "lib": exactly_once(Counter({v: n for v, n in found.items()
                                         if v.startswith(b"lib-")}),
                                self.lib.acked, [v for v, _ in self.lib.failed]),
            "java": exactly_once(Counter({v: n for v, n in found.items()
                                          if v.startswith(b"java-")}),
                                 self.java.values(), []),
            "group": self.log.check(ends),
            "lib_errors": self.lib.errors.counts(),
            "java_disconnects": self.java.stderr.count("disconnected")
            + self.java.stderr.count("could not be established"),
            "member_reads": [len(m.values) for m in self.members],
            "member_errors": [m.errors.counts() for m in self.members],
            "commit_errors": [str(e) for m in self.members for e in m.commit_errors],
        }
        assert set(found) <= {v for v in found if v.startswith((b"lib-", b"java-"))}
        assert not self.lib.errors.fatal(), self.lib.errors.fatal()
        assert not self.lib.failed, f"delivery failures: {self.lib.failed[:5]}"
        for m in self.members:
            assert not m.poll_errors, m.poll_errors[:5]
            assert not m.errors.fatal(), m.errors.fatal()
        return figures

    def assert_no_error_seen(self, figures: dict[str, Any]) -> None:
        """Beyond `finish`'s checks: not even a retriable error reached the application (a
        commit that failed, an error other than a connection closing)."""
        assert not figures["commit_errors"], figures["commit_errors"]
        assert not self.lib.errors.beyond_connection_loss(), self.lib.errors.seen
        for m in self.members:
            assert not m.errors.beyond_connection_loss(), m.errors.seen


def time_wait(herald: HeraldProcess) -> int:
    """Connections in TIME_WAIT on the Herald's ports (what a dead process leaves behind, and
    what its successor must bind next to)."""
    ports = range(herald.port_base, herald.port_base + 16)
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in list(f)[1:]:
                fields = line.split()
                if fields[3] == "06" and int(fields[1].rsplit(":", 1)[1], 16) in ports:
                    count += 1
    return count
