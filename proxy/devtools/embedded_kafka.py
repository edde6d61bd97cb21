"""A real Apache Kafka cluster in KRaft combined mode, started from the cached Maven jars.

`herald dev` runs a one-node cluster behind the proxy; the test suite and the benchmarks run
one- and three-node clusters. Each node is a separate JVM (`kafka.Kafka`) whose stdout goes to
a log file in the cluster's work folder, so a failing start can be diagnosed afterwards.
"""

from __future__ import annotations

import base64
import collections
import itertools
import os
import random
import shlex
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from configuration import jvm_archive
from protocol.kafka_versions import KAFKA_VERSION
from proxy.devtools.kafka_dist import classpath

_LOG4J2 = """status = error
appender.out.type = Console
appender.out.name = OUT
appender.out.target = SYSTEM_ERR
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = OUT
"""
_LOG4J1 = """log4j.rootLogger={level}, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.Target=System.err
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
"""
_READY_MARK = "Kafka Server started"


class KafkaStartError(RuntimeError):
    """A broker did not come up; the message carries the tail of its log."""


def unassigned_ports(step: int = 1) -> list[int]:
    """Ports outside the kernel's range for outgoing connections (ip_local_port_range), in
    random order, `step` apart.

    A port chosen now and bound later (a broker, a Herald listener) must not be one the
    kernel can meanwhile hand to an outgoing connection as its local port: bind(0) picks from
    that very range, and a connection on the port, even one closed and in TIME_WAIT, makes
    the later bind fail."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(v) for v in f.read().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    ports = [base for base in (*range(10000, low - step, step),
                               *range(high + 1, 65536 - step, step))
             if _in_share(base, step)]
    return random.sample(ports, len(ports))


JVM_OPTS_ENV = "HERALD_KAFKA_JVM_OPTS"


def jvm_opts(cp: str) -> list[str]:
    """Extra flags for every JVM the harness starts on the classpath `cp` (brokers, their
    storage tool, and the test suite's Java tools): `HERALD_KAFKA_JVM_OPTS`, split as a shell
    would, and the class archive of that classpath once `proxy.devtools.kafka_archive` made
    one. The test suite sets the variable so that brokers carrying a few records spend less
    CPU on JIT and GC threads than on the records; unset, the JVMs run with their defaults
    (the benchmarks, `herald dev`)."""
    return [*shlex.split(os.environ.get(JVM_OPTS_ENV, "")),
            *jvm_archive.use_flags(class_archive(cp))]


def class_archive(cp: str) -> Path:
    """Where the class archive of Kafka's JVMs on `cp` is kept (configuration/jvm_archive.py):
    one per Kafka release, made from a broker's run and used by its tools too."""
    return jvm_archive.archive_path("kafka", cp.split(os.pathsep))


PORT_SHARE_ENV = "HERALD_PORT_SHARE"
_SHARE_SPAN = 256  # ports per slice of the shared range


def port_share() -> tuple[int, int]:
    """Which slice of the free ports this process picks from: `HERALD_PORT_SHARE=i/n` gives
    it every n-th run of 256 ports, starting with the i-th (default 0/1: all of them).

    Several harnesses on one machine (the test suite's parallel workers) each start brokers
    and proxies on ports they chose a moment before: in disjoint slices no two of them can
    pick the same port in that moment."""
    value = os.environ.get(PORT_SHARE_ENV, "")
    if not value:
        return 0, 1
    index, _, count = value.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        raise ValueError(f"{PORT_SHARE_ENV}={value!r}: expected i/n, as 0/2") from None
    if not 0 <= i < n:
        raise ValueError(f"{PORT_SHARE_ENV}={value!r}: i must be in 0..n-1")
    return i, n


def _in_share(base: int, count: int) -> bool:
    """Whether the ports base .. base+count-1 all lie in this process's slice."""
    index, share = port_share()
    first, last = base // _SHARE_SPAN, (base + count - 1) // _SHARE_SPAN
    return first == last and first % share == index


# The ports this process handed out last (base, count). A port is bound only when its broker
# or Herald starts, so a harness that takes several before starting any (a broker's five
# listeners, a Herald's block beside an admin port) would otherwise, now and then, be handed
# the same free port twice.
_HANDED: collections.deque[tuple[int, int]] = collections.deque(maxlen=1024)
_HANDED_LOCK = threading.Lock()


def _handed(base: int, count: int) -> bool:
    return any(base < b + n and b < base + count for b, n in _HANDED)


def _bindable(host: str, base: int, count: int) -> bool:
    socks = []
    try:
        for port in range(base, base + count):
            s = socket.socket()
            socks.append(s)
            s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        for s in socks:
            s.close()


def free_port_block(count: int = 16, host: str = "127.0.0.1") -> int:
    """A base port such that base .. base+count-1 are all bindable right now, outside the
    range outgoing connections take their ports from (`unassigned_ports`), and overlapping
    no port this process handed out recently; ports the kernel picks when none is. The
    default, 16, is a Herald's: its bootstrap and the ports it gives the brokers it learns."""
    def probed() -> int:
        with socket.socket() as probe:
            probe.bind((host, 0))
            port: int = probe.getsockname()[1]  # (host, port) for an AF_INET socket
            return port

    bases = unassigned_ports(count)[:200]
    with _HANDED_LOCK:
        for base in itertools.chain(bases, (probed() for _ in range(200))):
            if base + count > 65000 or _handed(base, count):
                continue
            if _bindable(host, base, count):
                _HANDED.append((base, count))
                return base
    raise RuntimeError(f"no free block of {count} ports on {host}")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free right now and not handed out recently (`free_port_block` of one)."""
    return free_port_block(1, host)


def write_log_config(folder: Path, level: str = "INFO") -> list[str]:
    """Write log4j2 and log4j1 configs; return the JVM flags that select them.

    Both are written because 4.x logs through log4j2 and 3.9 through reload4j; each backend
    ignores the other's property.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("log4j2.properties", _LOG4J2), ("log4j.properties", _LOG4J1)):
        # Replaced whole: a JVM another process starts meanwhile never reads half a file.
        staged = folder / f".{name}.{os.getpid()}"
        staged.write_text(text.format(level=level))
        os.replace(staged, folder / name)
    return [
        f"-Dlog4j2.configurationFile={folder / 'log4j2.properties'}",
        f"-Dlog4j.configuration=file:{folder / 'log4j.properties'}",
    ]


@dataclass
class KafkaNode:
    node_id: int
    port: int
    controller_port: int
    folder: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.folder / "server.log"

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@dataclass(frozen=True)
class ExtraListener:
    """One more listener on a single-node cluster, advertising another address.

    Clients that bootstrap through it are told the broker is at `advertised_port`, so
    something listening there (a relay, say) stays in their path for every later connection.
    `protocol` is its security protocol (PLAINTEXT, SSL, SASL_SSL, SASL_PLAINTEXT); the
    settings it needs go in `KafkaCluster.extra_properties`.
    """

    name: str
    port: int
    advertised_port: int
    protocol: str = "PLAINTEXT"
    host: str = "127.0.0.1"  # the address it binds and advertises


@dataclass
class KafkaCluster:
    """`size` combined broker+controller nodes with node ids 1..size on free loopback ports."""

    size: int = 1
    version: str = KAFKA_VERSION
    workdir: Path | None = None
    heap: str = "768m"
    extra_properties: dict[str, str] = field(default_factory=dict)
    extra_listeners: list[ExtraListener] = field(default_factory=list)
    # SCRAM users created when the storage is formatted, as the storage tool's --add-scram
    # takes them: "SCRAM-SHA-512=[name=alice,password=alice-secret]".
    scram_credentials: list[str] = field(default_factory=list)
    nodes: list[KafkaNode] = field(default_factory=list)
    # The (single) node writes the class archive of its classpath when it stops, instead of
    # starting from one (`proxy.devtools.kafka_archive`); `archive_failure` says why, when
    # it wrote none.
    train_archive: bool = False
    archive_failure: str | None = None
    _own_workdir: bool = False

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def node(self, node_id: int) -> KafkaNode:
        return next(n for n in self.nodes if n.node_id == node_id)

    def start(self, timeout: float = 180.0) -> KafkaCluster:
        if (self.extra_listeners or self.train_archive) and self.size != 1:
            raise ValueError("extra_listeners and train_archive are for single-node clusters")
        cp = classpath(self.version)
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="herald-kafka-"))
            self._own_workdir = True
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.nodes = [
            KafkaNode(i, free_port(), free_port(), self.workdir / f"node-{i}")
            for i in range(1, self.size + 1)
        ]
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        cluster_id = _cluster_id()
        for node in self.nodes:
            props = self._properties(node, voters)
            node.folder.mkdir(parents=True, exist_ok=True)
            conf = node.folder / "server.properties"
            conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            fmt = subprocess.run(
                ["java", *jvm_opts(cp), "-cp", cp, "kafka.tools.StorageTool", "format", "-t",
                 cluster_id,
                 "-c", str(conf), "--ignore-formatted",
                 *(arg for c in self.scram_credentials for arg in ("--add-scram", c))],
                capture_output=True, text=True,
            )
            if fmt.returncode != 0:
                raise KafkaStartError(
                    f"formatting the storage of node {node.node_id} failed:\n"
                    f"{fmt.stdout}{fmt.stderr}"
                )
        for node in self.nodes:
            self._launch(node, cp)
        self._await_ready(self.nodes, timeout)
        return self

    def stop_node(self, node_id: int) -> None:
        """Stop one node (SIGTERM, then SIGKILL) — to test a broker that goes away."""
        _terminate(self.node(node_id))

    def restart_node(self, node_id: int, timeout: float = 120.0) -> None:
        node = self.node(node_id)
        _terminate(node)
        self._launch(node, classpath(self.version))
        self._await_ready([node], timeout)

    def stop(self) -> None:
        for node in self.nodes:
            # A training broker writes its archive (tens of MiB) as it stops: its SIGKILL
            # would throw the archive away, so it has longer to finish.
            _terminate(node, grace=120.0 if self.train_archive else 20.0)
        if self.train_archive and self.nodes and self.nodes[0].process is not None:
            self._commit_archive(self.nodes[0])
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _commit_archive(self, node: KafkaNode) -> None:
        """Put the training broker's archive in place, or say why there is none (read from
        its log before the log's folder goes)."""
        assert node.process is not None
        status = node.process.returncode
        if jvm_archive.commit(class_archive(classpath(self.version)), status):
            return
        said = [line for line in node.log_tail(2000).splitlines()
                if "cds" in line.lower() or "archive" in line.lower()]
        self.archive_failure = (f"{jvm_archive.not_committed(status)}; the broker's log says: "
                                + (" | ".join(said[-5:]) or "nothing about it"))

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _properties(self, node: KafkaNode, voters: str) -> dict[str, str]:
        rf = "1"
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(node.folder / "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": rf,
            "transaction.state.log.num.partitions": "5",
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": rf,
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
        }
        for extra in self.extra_listeners:
            props["listeners"] += f",{extra.name}://{extra.host}:{extra.port}"
            props["advertised.listeners"] += (
                f",{extra.name}://{extra.host}:{extra.advertised_port}")
            props["listener.security.protocol.map"] += f",{extra.name}:{extra.protocol}"
        props.update(self.extra_properties)
        return props

    def _launch(self, node: KafkaNode, cp: str) -> None:
        flags = write_log_config(node.folder)
        if self.train_archive:
            flags += jvm_archive.dump_flags(class_archive(cp))
        log = open(node.log_path, "ab")  # noqa: SIM115 - owned by the child process
        try:
            node.process = subprocess.Popen(
                ["java", f"-Xmx{self.heap}", "-Xms256m", *jvm_opts(cp), *flags, "-cp", cp,
                 "kafka.Kafka",
                 str(node.folder / "server.properties")],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=_die_with_parent,
            )
        finally:
            log.close()

    def _await_ready(self, nodes: list[KafkaNode], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = list(nodes)
        offsets = {n.node_id: _size(n.log_path) for n in nodes}
        while pending:
            for node in list(pending):
                assert node.process is not None
                if node.process.poll() is not None:
                    raise KafkaStartError(
                        f"broker {node.node_id} exited with {node.process.returncode}:\n"
                        f"{node.log_tail()}"
                    )
                if _READY_MARK in _read_from(node.log_path, offsets[node.node_id]):
                    pending.remove(node)
            if pending and time.monotonic() > deadline:
                tails = "\n".join(f"--- node {n.node_id}\n{n.log_tail()}" for n in pending)
                self.stop()
                raise KafkaStartError(f"brokers not ready after {timeout:.0f}s:\n{tails}")
            if pending:
                time.sleep(0.2)


def _die_with_parent() -> None:
    """Linux: the broker gets SIGTERM if the process that started it dies without cleanup."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, 15)  # PR_SET_PDEATHSIG, SIGTERM
    except OSError:
        pass


def _cluster_id() -> str:
    """A KRaft cluster id: a random UUID in Kafka's url-safe base64 form (22 chars).

    Like Kafka's own generator, never one that starts with '-': the storage tool would read
    it as an option.
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_from(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _terminate(node: KafkaNode, grace: float = 20.0) -> None:
    proc = node.process
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass
