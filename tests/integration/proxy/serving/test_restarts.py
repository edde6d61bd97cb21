"""A Herald that dies loses nothing: real clients (an idempotent librdkafka producer, the Java
producer, a group of librdkafka consumers that a Java or a librdkafka consumer joins after a
restart) keep working while a Herald in front of them is SIGKILLed and started again with the
same command and ports (what a kubelet does), or stopped with SIGTERM and started again, one
after the other (a rolling restart).

Afterwards a fresh consumer reads the topic straight from the broker: every acknowledged
record is there exactly once, the group read every offset and re-read none it had committed,
and the clients surfaced no error beyond a lost connection.
"""

from __future__ import annotations

import signal

from proxy.devtools.embedded_kafka import KafkaCluster
from tests.support.clients import create_topic
from tests.support.herald_process import HeraldProcess
from tests.support.restart_clients import (
    Traffic,
    client_connections,
    herald_with_admin,
    time_wait,
)


def kill(herald: HeraldProcess) -> None:
    """SIGKILL: no drain, every connection cut with requests in flight."""
    herald.signal(signal.SIGKILL)
    herald.wait(timeout=30)


def test_gateway_member_killed_mid_traffic(kafka: KafkaCluster, topic_name: str) -> None:
    """Two Heralds in front of one broker, every client bootstrapped with both. Each in turn
    (the one holding more client connections first, so every client loses its Herald at
    least once) is killed mid-traffic: the clients carry on through the other while it is
    down, and it starts again on the same ports. A Java consumer joining the group afterwards
    takes partitions over from their committed offsets."""
    create_topic(kafka.bootstrap, topic_name, 3)
    a, b = herald_with_admin(kafka.bootstrap), herald_with_admin(kafka.bootstrap)
    with a, b:
        both = f"{a.bootstrap},{b.bootstrap}"
        traffic = Traffic(topic_name, lib=both, java=both, members=[both, both])
        traffic.wait_flowing("before the kill")
        first = max((a, b), key=client_connections)
        lingering = []
        for victim in (first, b if first is a else a):
            kill(victim)
            traffic.wait_flowing("through the survivor")
            lingering.append(time_wait(victim))
            victim.start()  # same config, same ports: the listeners bind again
            traffic.wait_flowing("after the restart")
        traffic.join(both, java=True)
        traffic.wait_joined()
        figures = traffic.finish(kafka.bootstrap)
    print("gateway, SIGKILL:", figures, "TIME_WAIT at restart:", lingering)


def test_sidecar_killed_mid_traffic(kafka: KafkaCluster, topic_name: str) -> None:
    """One Herald per client, as sidecars: the sidecars of the librdkafka producer, the Java
    producer and one group member are killed at once mid-traffic; those clients wait, retrying
    as they do by default, until their sidecar is back on the same ports."""
    create_topic(kafka.bootstrap, topic_name, 3)
    sidecars = [herald_with_admin(kafka.bootstrap) for _ in range(4)]
    for s in sidecars:
        s.start()
    try:
        lib, java, first, second = sidecars
        traffic = Traffic(topic_name, lib=lib.bootstrap, java=java.bootstrap,
                          members=[first.bootstrap, second.bootstrap])
        traffic.wait_flowing("before the kill")
        for s in (lib, java, first):
            kill(s)
        lingering = sum(map(time_wait, (lib, java, first)))
        assert lingering, "no connection in TIME_WAIT: the restart would show nothing of it"
        for s in (lib, java, first):
            s.start()  # binds next to the connections the killed process left in TIME_WAIT
        traffic.wait_flowing("after the restart")
        traffic.join(first.bootstrap)  # the partitions move, as when a pod is added
        traffic.wait_joined()
        figures = traffic.finish(kafka.bootstrap)
    finally:
        for s in sidecars:
            s.__exit__()
    print("sidecar, SIGKILL:", figures, "TIME_WAIT at restart:", lingering)


def test_gateway_rolling_restart_under_sigterm(kafka: KafkaCluster, topic_name: str) -> None:
    """A rolling restart of a gateway of two: SIGTERM one, wait for it to exit (it answers what
    is in flight within `shutdown.grace_s`), start it again, then the other. No client sees an
    error: no delivery failure, no failed commit, nothing but connections closing."""
    create_topic(kafka.bootstrap, topic_name, 3)
    a, b = herald_with_admin(kafka.bootstrap), herald_with_admin(kafka.bootstrap)
    with a, b:
        both = f"{a.bootstrap},{b.bootstrap}"
        traffic = Traffic(topic_name, lib=both, java=both, members=[both, both])
        traffic.wait_flowing("before the restart")
        for herald in (a, b):
            herald.signal(signal.SIGTERM)
            assert herald.wait(timeout=30) == 0, herald.logs()[-3000:]
            herald.start()
            traffic.wait_flowing("after a restart")
        figures = traffic.finish(kafka.bootstrap)
        traffic.assert_no_error_seen(figures)
    print("gateway, rolling SIGTERM:", figures)
