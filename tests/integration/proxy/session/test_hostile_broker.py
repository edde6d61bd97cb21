"""Herald in front of a hostile broker, end to end, with real clients (librdkafka).

The broker (tests/support/hostile_broker.py) answers ApiVersions and Metadata correctly and
then, on the victims' connections, mutates Produce, Fetch and Metadata responses at random
(bits flipped, cut short, lengthened, varints of 2^63, huge lengths, wrong correlation ids,
size prefixes that lie) and sends every response in random pieces. Victim producers and
consumers run against it through Herald for a while, each in a process of its own (librdkafka
aborts on some such answers, as an application would); steady clients, whose connections it
leaves alone, produce and consume through the same Herald all along.

Run with the native relay as Herald runs by default (Produce passed or checked for leader
hints, Fetch v16 walked as it streams) and with chains the engine runs itself (Produce
stamped, Fetch scanned). Then: every victim session is closed within its deadlines once its
client is gone, the memory budget is back to zero, Herald is still up, and the steady
clients never failed.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from proxy.devtools.embedded_kafka import free_port
from tests.support.herald_process import REPO, HeraldProcess, herald_config
from tests.support.hostile_broker import HostileBroker
from tests.support.metrics import http_get, scrape, total
from tests.support.native_parts import ENGINE, needs

pytestmark = needs(ENGINE)

IDLE_S, FRAME_S = 3.0, 3.0
PHASE_S = 15.0  # the victims run at least this long,
PHASE_MAX_S = 90.0  # and on until the broker has mangled MUTATED_MIN answers, or this long
MUTATED_MIN = 20
VICTIMS = 4
PYTHON_PATH = "herald_python_path_total"
CHAINS = {"produce": [{"type": "trace_context"}],
          "fetch": [{"type": "drop_headers", "headers": ["x-debug"]}]}


@pytest.fixture(scope="module")
def broker() -> Iterator[HostileBroker]:
    with HostileBroker(rate=0.3, seed=11) as hostile:
        yield hostile


def herald(broker: HostileBroker, chains: bool) -> HeraldProcess:
    extra = {"interceptors": CHAINS} if chains else {}
    return HeraldProcess(herald_config(
        broker.bootstrap, admin={"bind": f"127.0.0.1:{free_port()}"},
        limits={"idle_timeout_s": IDLE_S, "frame_timeout_s": FRAME_S},
        performance={"native_relay": "auto"}, **extra))


class Steady(threading.Thread):
    """A producer and a consumer whose connections the broker leaves alone: each round
    produces a few records one by one and reads them back. Any failure is kept."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.topic = f"steady-{uuid.uuid4().hex[:6]}"
        self.stop = threading.Event()
        self.rounds = 0
        self.failures: list[str] = []

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "client.id": "steady-p",
                             "linger.ms": 0, "enable.idempotence": False,
                             "message.timeout.ms": 20000})
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "client.id": "steady-c",
                             "group.id": "steady", "enable.auto.commit": False,
                             "fetch.wait.max.ms": 100})
        consumer.assign([TopicPartition(self.topic, 0, 0)])
        try:
            while not self.stop.is_set():
                values = [f"round-{self.rounds}-{i}".encode() for i in range(5)]
                for value in values:
                    producer.produce(self.topic, value, headers=[("app", b"steady")])
                    if producer.flush(20) != 0:
                        self.failures.append(f"round {self.rounds}: a record was not sent")
                        return
                got: list[bytes] = []
                deadline = time.monotonic() + 20
                while len(got) < len(values) and time.monotonic() < deadline:
                    msg = consumer.poll(0.2)
                    if msg is not None and not msg.error():
                        got.append(msg.value())
                if got != values:
                    self.failures.append(f"round {self.rounds}: read {got}, not {values}")
                    return
                self.rounds += 1
        except KafkaException as exc:
            self.failures.append(f"round {self.rounds}: {exc}")
        finally:
            consumer.close()


def run_victims(bootstrap: str, seconds: float, enough: Callable[[], bool] = lambda: True,
                longest: float | None = None) -> int:
    """VICTIMS producer-and-consumer processes (tests/support/victim_client.py) for `seconds`
    and then until `enough()` (at most `longest` in all), each started again when it ends
    early (librdkafka aborts on some of what the broker sends). On a loaded machine the
    victims start slowly and send little, so the phase ends on what it has done, not on a
    clock alone. Returns how many ended early."""
    script = str(REPO / "tests" / "support" / "victim_client.py")
    start = time.monotonic()
    end = start + seconds
    last = start + (longest if longest is not None else seconds)
    running: list[subprocess.Popen] = []
    early = 0
    index = 0
    while time.monotonic() < end or (time.monotonic() < last and not enough()):
        for proc in [p for p in running if p.poll() is not None]:
            running.remove(proc)
            early += 1
        while len(running) < VICTIMS:
            index += 1
            left = max(1.0, end - time.monotonic(), 3.0)
            running.append(subprocess.Popen(
                [sys.executable, script, bootstrap, str(index), str(left)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(0.2)
    for proc in running:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return early


def open_connections(proc: HeraldProcess) -> str:
    """What is still connected to Herald's ports, who holds the other end, and the end of
    Herald's log: for a failure's message."""
    port = int(proc.bootstrap.rsplit(":", 1)[1])
    ports = f":{port} and {{}} <= :{port + 16}"
    sockets = subprocess.run(
        ["ss", "-tanpi", f"( sport >= {ports.format('sport')} ) or "
                         f"( dport >= {ports.format('dport')} )"],
        capture_output=True, text=True).stdout
    return f"{sockets}\n{proc.logs()[-3000:]}"


def client_sessions(proc: HeraldProcess) -> tuple[float, float, float]:
    samples = scrape(proc)
    return (total(samples, "herald_connections_active", side="client"),
            total(samples, "herald_connections_active", side="upstream"),
            total(samples, "herald_memory_budget_bytes", kind="used"))


def _stamped_and_scanned_on_the_engine(samples: dict) -> None:
    """With the chains, the engine stamped Produce requests and scanned Fetch responses
    itself: requests of both ran outside Python (every one the engine runs goes through the
    chain's plan: it stamps each Produce and scans each Fetch response), the members counted
    records on both paths, and none went to Python because the engine could not take it."""
    for api, path in (("Produce", "produce"), ("Fetch", "fetch")):
        requests = total(samples, "herald_requests_total", api=api)
        in_python = total(samples, PYTHON_PATH, scope="frame", api=api)
        assert requests - in_python > 0, (api, requests, in_python)
        assert total(samples, "herald_interceptor_records_total", path=path) > 0, path
        for reason in ("produce_chain", "fetch_chain"):
            assert total(samples, PYTHON_PATH, scope="frame", reason=reason, api=api) == 0


@pytest.mark.parametrize("chains", [False, True], ids=["relay", "stamp_and_scan"])
def test_hostile_broker_sessions_end_and_herald_stays_up(broker: HostileBroker,
                                                         chains: bool) -> None:
    with herald(broker, chains) as proc:
        steady = Steady(proc.bootstrap)
        steady.start()
        mutated_before = sum(broker.mutated.values())
        run_victims(proc.bootstrap, PHASE_S, longest=PHASE_MAX_S,
                    enough=lambda: sum(broker.mutated.values()) - mutated_before
                    > MUTATED_MIN)
        rounds_during = steady.rounds
        steady.stop.set()
        steady.join(60)

        mutated = sum(broker.mutated.values()) - mutated_before
        assert mutated > MUTATED_MIN, dict(broker.mutated)
        assert steady.failures == []
        assert rounds_during > 0  # the steady clients kept working while the victims did not
        # Every session is gone within its deadlines once its client is, and with it every
        # byte it held of the memory budget.
        deadline = time.monotonic() + IDLE_S + FRAME_S + 10
        while client_sessions(proc) != (0, 0, 0) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert client_sessions(proc) == (0, 0, 0), open_connections(proc)
        samples = scrape(proc)
        # The engine met the hostile bytes itself, and closed sessions for them.
        assert total(samples, "herald_native_relay_handovers_total",
                     reason="upstream_bad") > 0
        if chains:
            _stamped_and_scanned_on_the_engine(samples)
        assert proc.process is not None and proc.process.poll() is None
        assert http_get(proc.admin_url + "/healthz") == (200, "ok\n")
        # And a client that comes now is served.
        after = Steady(proc.bootstrap)
        after.start()
        time.sleep(3)
        after.stop.set()
        after.join(60)
        assert after.failures == [] and after.rounds > 0
        logs = proc.logs()
        assert "Traceback" not in logs, logs[logs.find("Traceback") - 600:][:4000]
