"""A Herald with the native relay set to a mode (`auto` or `off`) in front of a broker, for the
tests that compare the engine with the Python path."""

from __future__ import annotations

from proxy.devtools.embedded_kafka import KafkaCluster, free_port
from tests.support.herald_process import HeraldProcess, herald_config


def native_herald(kafka: KafkaCluster, mode: str, **overrides: object) -> HeraldProcess:
    return HeraldProcess(herald_config(
        kafka.bootstrap, admin={"bind": f"127.0.0.1:{free_port()}"},
        performance={"native_relay": mode}, **overrides))
