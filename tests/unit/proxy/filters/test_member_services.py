"""Members ask the proxy for what they need beyond records through their declared interface
(`Interceptor.uses`, `interceptors.services`), a plugin exactly as a built-in: the consumer
groups clients read for, and Kafka clients towards a cluster of their own, whose security
sections the proxy checks and maps."""

from __future__ import annotations

from pathlib import Path

import pytest

from configuration import ConfigError, InvalidConfig
from interceptors import ConnectionInfo, Interceptor, ProxyInfo, RecordContext
from interceptors.chains_from_yaml import build_chains as build_member_chains
from interceptors.plugins import Registry
from interceptors.services import CONSUMER_GROUPS, KAFKA_CLIENTS
from protocol.api_keys import ApiKey
from protocol.messages import REQUESTS
from protocol.records import Record, build_batch, split_batches
from proxy.filters.chain import Exchange, SessionContext
from proxy.filters.group_learner import ConsumerGroupLearner
from proxy.filters.member_services import build_chains
from proxy.security.kafka_clients import KafkaClientFactory, MemberCluster, proxy_info


class GroupReader(Interceptor):
    """A plugin that notes the group each batch's reader reads for."""

    needs = "read"
    uses = frozenset({CONSUMER_GROUPS})

    def __init__(self, config: object, env: ProxyInfo) -> None:
        super().__init__(config, env)
        self.seen: list[str | None] = []

    def on_batch(self, ctx: RecordContext) -> None:
        groups = self.env.groups
        assert groups is not None
        self.seen.append(groups.group_of(ctx.address, ctx.client_id))

    def on_record(self, ctx: RecordContext, headers: object) -> None:
        return None


class Misspelt(Interceptor):
    uses = frozenset({"consumer_group"})

    def on_record(self, ctx: RecordContext, headers: object) -> None:
        return None


def _registry(**classes: type[Interceptor]) -> Registry:
    return Registry(builtins=classes, plugins={})


async def test_a_plugin_that_uses_the_consumer_groups_gets_what_the_learner_learned() -> None:
    info = ProxyInfo()
    chains = build_member_chains({"fetch": [{"type": "group_reader"}]}, info,
                                 registry=_registry(group_reader=GroupReader))
    learner = ConsumerGroupLearner(lambda: chains, info)
    assert learner.wants_request(ApiKey.JOIN_GROUP, 9)
    join = REQUESTS[ApiKey.JOIN_GROUP]
    msg = join.decode(join(group_id="orders", protocol_type="consumer").encode(9), 9)
    ctx = SessionContext("10.1.1.1:4000", "broker-0", "b:9092", client_id="app-1")
    await learner.on_request(ctx, Exchange(), ApiKey.JOIN_GROUP, 9, msg)
    batches = split_batches(build_batch([Record(None, b"v", [])]))
    chains.fetch.process("t", 0, batches, ConnectionInfo("app-1", "10.1.1.1:5000"))
    chains.fetch.process("t", 0, batches, ConnectionInfo("app-2", "10.1.1.1:5000"))
    assert chains.fetch.members[0].interceptor.seen == ["orders", None]


def test_the_learner_stays_off_while_no_member_uses_the_groups() -> None:
    info = ProxyInfo()
    chains = build_member_chains({"produce": [{"type": "trace_context"}],
                                  "fetch": [{"type": "drop_headers", "headers": ["x"]}]}, info)
    assert not ConsumerGroupLearner(lambda: chains, info).wants_request(ApiKey.JOIN_GROUP, 9)


def test_chains_say_which_services_their_members_use() -> None:
    fetch_log = {"type": "fetch_log", "bootstrap": "127.0.0.1:1"}
    chains = build_member_chains({"fetch": [fetch_log]}, ProxyInfo())
    assert chains.uses(CONSUMER_GROUPS) and chains.uses(KAFKA_CLIENTS)
    plain = build_member_chains({"produce": [{"type": "audit"}]}, ProxyInfo())
    assert not plain.uses(CONSUMER_GROUPS) and not plain.uses(KAFKA_CLIENTS)


def test_a_member_that_declares_an_unknown_service_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^interceptors\.produce\[0\]\.type: 'misspelt' uses "
                       r"unknown services \['consumer_group'\] \(known: consumer_groups, "
                       r"kafka_clients\)"):
        build_member_chains({"produce": [{"type": "misspelt"}]},
                            registry=_registry(misspelt=Misspelt))


def test_the_proxy_checks_a_members_cluster_as_it_checks_upstream(tmp_path: Path) -> None:
    clients = KafkaClientFactory()
    with pytest.raises(InvalidConfig) as missing:
        clients.client("k:9093", tls={"ca_file": str(tmp_path / "nope.pem")})
    assert missing.value.field == "tls.ca_file" and "nope.pem" in missing.value.message
    with pytest.raises(InvalidConfig) as mechanism:
        clients.client("k:9093", sasl={"mechanism": "MD5"})
    assert mechanism.value.field == "sasl.mechanism"

    (tmp_path / "password").write_text("hunter2\n")
    sasl = {"mechanism": "PLAIN", "username": {"env": "HOME"},
            "password": {"file": str(tmp_path / "password")}}
    cluster = clients.client("k:9093", sasl=sasl)
    assert cluster == clients.client("k:9093", sasl=sasl)  # one producer across reloads
    assert hash(cluster) == hash(clients.client("k:9093", sasl=sasl))
    assert cluster != clients.client("k:9094", sasl=sasl)
    settings = cluster.librdkafka()
    assert settings["bootstrap.servers"] == "k:9093"
    assert settings["security.protocol"] == "SASL_PLAINTEXT"
    assert settings["sasl.password"] == "hunter2" and "hunter2" not in repr(cluster)
    assert clients.client("k:9092").librdkafka() == {
        "bootstrap.servers": "k:9092", "security.protocol": "PLAINTEXT"}


def test_the_proxy_builds_members_with_its_services() -> None:
    info = proxy_info("herald-7")
    assert info.instance_id == "herald-7" and isinstance(info.kafka, KafkaClientFactory)
    chains = build_chains({"fetch": [{"type": "fetch_log", "bootstrap": "k:9092"}]})
    config = chains.fetch.members[0].interceptor.config
    assert config.cluster == MemberCluster("k:9092")
    assert config.producer_settings()["security.protocol"] == "PLAINTEXT"
    with pytest.raises(ConfigError, match=r"^interceptors\.fetch\[0\]\.tls: cert_file and "
                       "key_file go together"):
        build_chains({"fetch": [{"type": "fetch_log", "bootstrap": "k:9092",
                                 "tls": {"cert_file": "/etc/hosts"}}]}, info)


def test_fetch_log_without_a_proxy_reaches_a_plaintext_cluster_only() -> None:
    plain = build_member_chains({"fetch": [{"type": "fetch_log", "bootstrap": "k:9092"}]})
    settings = plain.fetch.members[0].interceptor.config.producer_settings()
    assert settings["bootstrap.servers"] == "k:9092" and "security.protocol" not in settings
    secured = build_member_chains({"fetch": [{"type": "fetch_log", "bootstrap": "k:9093",
                                              "tls": {"ca_file": "/nowhere.pem"}}]})
    with pytest.raises(RuntimeError, match="tls and sasl need the proxy's Kafka clients"):
        secured.fetch.members[0].interceptor.config.producer_settings()
