"""A real librdkafka producer sending at a steady rate in a thread, for tests that check
that Herald keeps serving ordinary clients while something hostile happens beside them."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import Producer


@dataclass
class SteadyProducer:
    bootstrap: str
    topic: str
    rate: float = 50.0  # records per second
    conf: dict[str, object] = field(default_factory=dict)
    sent: int = 0
    delivered: int = 0
    errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)  # seconds, send to delivery report
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> SteadyProducer:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=60)

    def _run(self) -> None:
        producer = Producer({
            "bootstrap.servers": self.bootstrap, "linger.ms": 0, "acks": "all", **self.conf,
        })

        def report(err: object, _msg: object, started: float) -> None:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.delivered += 1
                self.latencies.append(time.monotonic() - started)

        period = 1.0 / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            started = time.monotonic()
            producer.produce(
                self.topic, value=b"steady-%d" % self.sent,
                on_delivery=lambda err, msg, s=started: report(err, msg, s),
            )
            self.sent += 1
            producer.poll(0)
            next_at += period
            time.sleep(max(0.0, next_at - time.monotonic()))
        left = producer.flush(30)
        if left:
            self.errors.append(f"{left} records not delivered at the end")

    def check(self, at_least: int) -> None:
        """Every record sent was delivered, and there were at least `at_least` of them."""
        assert not self.errors, self.errors[:5]
        assert self.delivered == self.sent, (self.delivered, self.sent)
        assert self.sent >= at_least, self.sent
