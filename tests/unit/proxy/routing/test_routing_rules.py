"""Routing rules without a broker: config validation, predicates, first match, murmur2,
sequence rewriting and the librdkafka settings of a cluster section."""

from __future__ import annotations

import pytest

from protocol.records import Record, RecordBatch, build_batch
from proxy.routing.arrival import PartitionArrival
from proxy.routing.partitioner import key_partition, murmur2
from proxy.routing.predicates import compile_predicate
from proxy.routing.produce_filter import _kept_batch
from proxy.routing.rules import ORIGIN_HEADER, RoutingTable
from proxy.routing.sequences import SequenceMap
from tests.support.routing_config import BASE, config, error

# --- configuration ---------------------------------------------------------------------------

def test_a_rule_of_each_kind_parses() -> None:
    cfg = config([
        {"name": "eu", "match": {"topics": ["orders"], "headers": {"header": "region",
                                                                   "equals": "eu"}},
         "cluster": "eu", "topic": "orders-eu", "partition": "key"},
        {"match": {"client_ids": ["prefix:batch"]}, "topic": "slow", "partition": 3},
        {"match": {"headers": {"header": "debug", "present": True}},
         "mirror": {"cluster": "eu"}, "shadow": True},
        {"match": {"headers": {"header": "pii", "eq": True}}, "reject": "no pii here"},
    ])
    rules = cfg.routing.rules
    assert [r.action for r in rules] == ["move", "move", "mirror", "reject"]
    assert rules[0].target.partition == "key" and rules[1].target.partition == 3
    assert rules[1].name == "rule-1" and rules[2].shadow
    assert rules[3].message == "no pii here"
    assert cfg.clusters["eu"].bootstrap[0].port == 9092
    assert cfg.routing.clusters() == {"eu", "upstream"}


@pytest.mark.parametrize(("rules", "expected"), [
    ([{"match": {}, "cluster": "asia"}],
     "routing.rules[0].cluster: no cluster named 'asia'"),
    ([{"match": {}}], "routing.rules[0]: expected one action"),
    ([{"match": {}, "cluster": "eu", "reject": True}], "routing.rules[0]: expected one action"),
    ([{"cluster": "eu"}], "routing.rules[0].match: required"),
    ([{"match": {"headers": {"header": "a", "equals": "x", "prefix": "y"}}, "cluster": "eu"}],
     "routing.rules[0].match.headers: expected exactly one operator"),
    ([{"match": {"headers": {"any": [{"header": "a", "regex": "("}]}}, "cluster": "eu"}],
     "routing.rules[0].match.headers.any[0].regex: invalid regular expression"),
    ([{"match": {"headers": {"header": "a", "gt": "soon"}}, "cluster": "eu"}],
     "routing.rules[0].match.headers.gt: expected a number, true/false or a timestamp"),
    ([{"match": {"headers": {"header": "a", "gt": True}}, "cluster": "eu"}],
     "routing.rules[0].match.headers.gt: booleans compare with eq or ne only"),
    ([{"match": {"topics": ["regex:("]}, "cluster": "eu"}],
     "routing.rules[0].match.topics[0]: invalid regex"),
    ([{"match": {}, "cluster": "eu", "partition": -1}],
     "routing.rules[0].partition: expected same, key or a partition number"),
    ([{"match": {}, "topic": "x", "colour": "red"}], "routing.rules[0].colour: unknown key"),
    ([{"match": {}}, {"match": {}, "cluster": "eu"}], "routing.rules[0]: expected one action"),
    ([{"name": "a", "match": {}, "topic": "x"}, {"name": "a", "match": {}, "topic": "y"}],
     "routing.rules[1].name: 'a' is used twice"),
    ([{"match": {}, "cluster": "upstream"}],
     "routing.rules[0]: a move within the primary cluster needs a topic"),
])
def test_bad_rules_name_their_yaml_path(rules: list, expected: str) -> None:
    assert error(rules).startswith(expected)


def test_cluster_sections_are_validated_like_upstream() -> None:
    assert error([], {"eu": {"bootstrap": "nowhere"}}).startswith(
        "clusters.eu.bootstrap: expected HOST:PORT")
    assert error([], {"eu": {"bootstrap": "h:1", "sasl": {"mechanism": "PLAIN"}}}).startswith(
        "clusters.eu.sasl.username: required")
    assert error([], {"upstream": {"bootstrap": "h:1"}}).startswith("clusters.upstream:")


# --- predicates ------------------------------------------------------------------------------

def check(node: object, headers: list) -> bool:
    return compile_predicate(node, "p")(headers)


def test_string_predicates_read_the_last_value_of_a_key() -> None:
    hs = [("region", b"us"), ("region", b"eu"), ("tenant", b"acme-1"), ("n", None)]
    assert check({"header": "region", "equals": "eu"}, hs)
    assert not check({"header": "region", "equals": "us"}, hs)
    assert check({"header": "region", "one_of": ["eu", "uk"]}, hs)
    assert check({"header": "tenant", "prefix": "acme"}, hs)
    assert check({"header": "tenant", "regex": "acme-[0-9]+"}, hs)
    assert not check({"header": "tenant", "regex": "acme"}, hs)  # whole value
    assert check({"header": "n", "present": True}, hs)
    assert check({"header": "x", "absent": True}, hs)
    assert not check({"header": "n", "equals": ""}, hs)


def test_typed_comparisons_follow_kip_145_values() -> None:
    hs = [("amount", b"250.5"), ("vip", b"true"), ("at", b"2026-01-02T03:04:05.000Z"),
          ("ms", b"1700000000000"), ("text", b"abc")]
    assert check({"header": "amount", "gt": 250}, hs)
    assert not check({"header": "amount", "le": 250}, hs)
    assert check({"header": "vip", "eq": True}, hs)
    assert check({"header": "vip", "ne": False}, hs)
    assert check({"header": "at", "ge": "2026-01-01T00:00:00Z"}, hs)
    assert check({"header": "ms", "lt": "2024-01-01T00:00:00Z"}, hs)
    assert not check({"header": "text", "gt": 0}, hs)  # not a number: no match, no error
    assert not check({"header": "text", "eq": True}, hs)
    assert not check({"header": "missing", "lt": 1}, hs)


def test_combinators() -> None:
    hs = [("a", b"1"), ("b", b"2")]
    assert check({"all": [{"header": "a", "equals": "1"}, {"header": "b", "gt": 1}]}, hs)
    assert check({"any": [{"header": "a", "equals": "9"}, {"header": "b", "gt": 1}]}, hs)
    assert not check({"not": {"header": "a", "present": True}}, hs)
    assert check([{"header": "a", "present": True}, {"header": "c", "absent": True}], hs)


# --- first match ------------------------------------------------------------------------------

def test_first_live_match_wins_and_shadow_rules_only_count() -> None:
    cfg = config([
        {"name": "s", "match": {"headers": {"header": "r", "equals": "eu"}}, "cluster": "eu",
         "shadow": True},
        {"name": "eu", "match": {"topics": ["orders"],
                                 "headers": {"header": "r", "equals": "eu"}}, "cluster": "eu"},
        {"name": "all", "match": {}, "topic": "elsewhere"},
    ])
    table = RoutingTable(cfg.routing)
    rules = table.candidates("orders", "app")
    decision = table.decide(rules, [("r", b"eu")])
    assert decision.rule.name == "eu" and [r.name for r in decision.shadowed] == ["s"]
    assert table.decide(rules, [("r", b"us")]).rule.name == "all"
    other = table.candidates("payments", "app")
    assert [r.name for r in other] == ["s", "all"]


def test_records_routed_once_are_not_routed_again_but_may_be_rejected() -> None:
    cfg = config([
        {"name": "eu", "match": {"headers": {"header": "r", "equals": "eu"}}, "cluster": "eu"},
        {"name": "no", "match": {"headers": {"header": "bad", "present": True}},
         "reject": True},
    ])
    table = RoutingTable(cfg.routing)
    rules = table.candidates("t", None)
    # A record Herald routed before: its origin header is a mark Herald's seal verifies (a
    # header a client wrote is not: see test_origin.py).
    routed = [("r", b"eu"), (ORIGIN_HEADER, table.seal.mark(b"cluster-1", b"k", b"v"))]
    arrived = PartitionArrival(table.seal).batch(0, RecordBatch(build_batch(
        [Record(b"k", b"v", routed)])))
    assert table.decide(rules, routed, arrived, 0).rule is None
    assert table.decide(rules, [*routed, ("bad", b"")], arrived, 0).rule.name == "no"


# --- murmur2 ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "hashed", "in_7"), [
    # Values printed by org.apache.kafka.common.utils.Utils (kafka-clients 4.3.1).
    ("21", -973932308, 3),
    ("foobar", -790332482, 0),
    ("a-little-bit-long-string", -985981536, 1),
    ("a-little-bit-longer-string", -1486304829, 0),
    ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971, 3),
    ("abc", 479470107, 4),
    ("", 275646681, 2),
    ("x", 2121525046, 4),
    ("key-17", 956945460, 2),
])
def test_murmur2_matches_the_java_client(text: str, hashed: int, in_7: int) -> None:
    assert murmur2(text.encode()) == hashed
    assert key_partition(text.encode(), 7) == in_7


# --- sequences --------------------------------------------------------------------------------

def test_upstream_sequences_stay_gapless_when_records_leave() -> None:
    seqs = SequenceMap()
    key = (7, "t", 0)
    a = seqs.record(key, 0, 0, 10, 6, "p0")  # 4 of 10 left
    b = seqs.record(key, 0, 10, 5, 0, "p1")  # all left
    c = seqs.record(key, 0, 15, 5, 5, "p2")
    assert (a.upstream_base, b.upstream_base, c.upstream_base) == (0, 6, 6)
    assert seqs.retry(key, 0, 10, 5) is b  # a retry finds its first attempt
    assert seqs.retry(key, 0, 10, 4) is None
    assert seqs.retry(key, 1, 10, 5) is None  # another epoch starts afresh
    d = seqs.record(key, 1, 0, 3, 3, "q")
    assert d.upstream_base == 0 and seqs.shift(key, 1) == 0


def test_a_shift_is_known_only_from_the_epochs_first_batch() -> None:
    seqs = SequenceMap()
    key = (7, "t", 0)
    assert seqs.knows(key, 0, 0)  # a producer's first batch: nothing shifted yet
    assert not seqs.knows(key, 0, 40)  # seen first mid-way (Herald restarted): unknown
    seqs.record(key, 0, 0, 10, 6, None)
    assert seqs.knows(key, 0, 10)
    assert not seqs.knows(key, 1, 10)  # another epoch Herald did not see start
    assert seqs.knows(key, 1, 0)
    assert not seqs.knows((7, "t", 1), 0, 10)  # per partition


def test_batches_older_than_the_window_are_duplicates() -> None:
    seqs = SequenceMap()
    key = (1, "t", 0)
    for i in range(20):
        seqs.record(key, 0, i * 2, 2, 1, None)
    assert seqs.is_stale(key, 0, 0)
    assert not seqs.is_stale(key, 0, 38)
    assert seqs.record(key, 0, 40, 2, 2, None).upstream_base == 20


def test_sequences_wrap_like_the_java_client() -> None:
    seqs = SequenceMap()
    key = (1, "t", 0)
    top = (1 << 31) - 2
    seqs.record(key, 0, top, 4, 2, None)
    assert seqs.record(key, 0, 2, 2, 2, None).upstream_base == 0


def test_kept_batch_is_renumbered_under_the_upstream_sequence() -> None:
    raw = build_batch([Record(b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)],
                              timestamp_delta=i) for i in range(5)],
                      producer_id=9, producer_epoch=2, base_sequence=100, base_timestamp=1000)
    batch = RecordBatch(raw)
    seqs = SequenceMap()
    attempt = seqs.record((9, "t", 0), 2, 100, 5, 3, None)
    attempt.upstream_base = 40
    kept = RecordBatch(_kept_batch(batch, frozenset({1, 3}), attempt))
    assert kept.crc_is_valid()
    assert (kept.producer_id, kept.producer_epoch, kept.base_sequence) == (9, 2, 40)
    assert kept.record_count == 3 and kept.last_offset_delta == 2
    assert [(r.key, r.timestamp_delta, r.offset_delta) for r in kept.records] == [
        (b"k0", 0, 0), (b"k2", 2, 1), (b"k4", 4, 2)]
    same = RecordBatch(_kept_batch(RecordBatch(raw), frozenset(), attempt))
    assert same.crc_is_valid() and same.base_sequence == 40
    assert same.raw[61:] == raw[61:]  # the records, byte for byte


# --- librdkafka settings of a cluster section -----------------------------------------------

def test_producer_settings_carry_the_cluster_security(monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from configuration import HostPort
    from proxy.routing.destinations import producer_settings
    from proxy.security.config import ClientTlsConfig, SaslClientConfig, SecretRef
    from proxy.upstream.config import UpstreamConfig

    monkeypatch.setenv("EU_USER", "router")
    monkeypatch.setenv("EU_PASS", "s3cret")
    tls = ClientTlsConfig(Path("/ca.pem"), Path("/c.pem"), Path("/k.pem"), verify_hostname=False)
    sasl = SaslClientConfig("SCRAM-SHA-512", SecretRef("u", env="EU_USER"),
                            SecretRef("p", env="EU_PASS"))
    hosts = [HostPort("a", 1), HostPort("b", 2)]
    s = producer_settings(UpstreamConfig(hosts, tls=tls, sasl=sasl), 12.5)
    assert s["bootstrap.servers"] == "a:1,b:2"
    assert s["security.protocol"] == "SASL_SSL"
    assert (s["ssl.ca.location"], s["ssl.certificate.location"], s["ssl.key.location"]) == (
        "/ca.pem", "/c.pem", "/k.pem")
    assert s["ssl.endpoint.identification.algorithm"] == "none"
    assert (s["sasl.mechanism"], s["sasl.username"], s["sasl.password"]) == (
        "SCRAM-SHA-512", "router", "s3cret")
    assert s["enable.idempotence"] is True and s["acks"] == "all"
    assert s["message.timeout.ms"] == 12500

    assert producer_settings(UpstreamConfig(hosts), 1)["security.protocol"] == "PLAINTEXT"
    only_tls = producer_settings(UpstreamConfig(hosts, tls=ClientTlsConfig()), 1)
    assert only_tls["security.protocol"] == "SSL"
    assert only_tls["ssl.endpoint.identification.algorithm"] == "https"
    assert "ssl.ca.location" not in only_tls


def test_oauthbearer_tokens_come_from_the_secret_with_their_expiry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import base64
    import json

    from confluent_kafka import Producer

    from configuration import HostPort
    from proxy.routing.destinations import producer_settings
    from proxy.security.config import SaslClientConfig, SecretRef
    from proxy.upstream.config import UpstreamConfig

    claims = base64.urlsafe_b64encode(json.dumps({"sub": "r", "exp": 2000000000}).encode())
    token = "e30." + claims.decode().rstrip("=") + "."
    monkeypatch.setenv("TOKEN", token)
    sasl = SaslClientConfig("OAUTHBEARER", token=SecretRef("t", env="TOKEN"))
    s = producer_settings(UpstreamConfig([HostPort("127.0.0.1", 1)], sasl=sasl), 5)
    assert s["security.protocol"] == "SASL_PLAINTEXT" and s["sasl.mechanism"] == "OAUTHBEARER"
    assert s["oauth_cb"](None) == (token, 2000000000.0)
    Producer(s).flush(0)  # librdkafka accepts every setting as given


# --- the produce filter on bytes ------------------------------------------------------------

def _filter(rules: list) -> object:
    from prometheus_client import CollectorRegistry

    from proxy.routing.produce_filter import RoutingFilter
    from proxy.routing.stats import RoutingStats
    from proxy.upstream.topic_ids import TopicIds

    table = RoutingTable(config(rules).routing)
    return RoutingFilter(table, TopicIds(), {}, RoutingStats(CollectorRegistry()))


async def test_a_batch_no_rule_touches_is_left_as_it_came() -> None:
    f = _filter([{"match": {"headers": {"header": "region", "equals": "eu"}},
                  "cluster": "eu"}])
    raw = build_batch([Record(b"k", b"v", [("region", b"us")])], producer_id=3,
                      producer_epoch=0, base_sequence=0, compression=1)
    candidates = f.table.candidates("t", None)
    records, plans, waits = await f._partition("t", 0, raw, candidates, -1)
    assert (records, plans, waits) == (None, [], False)


async def test_a_rejected_batch_is_refused_and_later_ones_stay_in_sequence() -> None:
    from proxy.routing.produce_filter import _Refuse

    f = _filter([{"name": "no", "match": {"headers": {"header": "pii", "present": True}},
                  "reject": "no pii"}])
    candidates = f.table.candidates("t", None)
    bad = build_batch([Record(b"k", b"v", [("pii", b"")]), Record(b"k", b"w")],
                      producer_id=3, producer_epoch=0, base_sequence=0)
    with pytest.raises(_Refuse) as info:
        await f._partition("t", 0, bad, candidates, -1)
    assert (info.value.outcome.error_code, info.value.outcome.error_message) == (87, "no pii")
    with pytest.raises(_Refuse):  # the client's retry of it: refused again
        await f._partition("t", 0, bad, candidates, -1)
    good = build_batch([Record(b"k", b"x")], producer_id=3, producer_epoch=0, base_sequence=2)
    records, _, _ = await f._partition("t", 0, good, candidates, -1)
    assert RecordBatch(records).base_sequence == 0  # the broker never saw sequences 0-1
    assert RecordBatch(records).raw[61:] == good[61:]


async def test_a_batch_whose_shift_is_unknown_is_refused_before_anything_is_sent() -> None:
    """A producer seen first mid-way (Herald restarted): UNKNOWN_PRODUCER_ID, nothing routed
    (the filter has no destination at all: sending would fail the test), nothing recorded;
    its epoch bumped, it starts from sequence 0 and goes through."""
    from proxy.routing.produce_filter import UNKNOWN_PRODUCER_ID, _Refuse

    f = _filter([{"match": {"headers": {"header": "region", "equals": "eu"}},
                  "cluster": "eu"}])
    candidates = f.table.candidates("t", None)
    stays = [Record(b"k", b"v", [("region", b"us")])]
    moves = Record(b"k", b"v", [("region", b"eu")])
    mid_way = build_batch([*stays, moves], producer_id=3, producer_epoch=0, base_sequence=40)
    with pytest.raises(_Refuse) as info:
        await f._partition("t", 0, mid_way, candidates, -1)
    assert info.value.outcome.error_code == UNKNOWN_PRODUCER_ID
    assert len(f.sequences) == 0
    bumped = build_batch(stays, producer_id=3, producer_epoch=1, base_sequence=0)
    assert await f._partition("t", 0, bumped, candidates, -1) == (None, [], False)
    tx = build_batch(stays, producer_id=4, producer_epoch=0, base_sequence=40,
                     is_transactional=True)  # never shifted: forwarded as it came
    assert await f._partition("t", 0, tx, candidates, -1) == (None, [], False)


# --- reload -----------------------------------------------------------------------------------

def test_sighup_reload_swaps_rules_and_refuses_a_cluster_that_needs_a_restart(
    tmp_path: object,
) -> None:
    import yaml

    from proxy.config.proxy_yaml import load_config
    from proxy.server import Proxy

    path = tmp_path / "proxy.yaml"  # type: ignore[operator]
    data = dict(BASE, clusters={"eu": {"bootstrap": "127.0.0.1:1"}},
                routing={"rules": [{"name": "eu", "match": {}, "cluster": "eu",
                                    "shadow": True}]})
    path.write_text(yaml.safe_dump(data))
    proxy = Proxy(load_config(path))
    assert set(proxy.destinations) == {"eu"}
    assert proxy.routing.table.rules[0].shadow

    data["routing"]["rules"][0]["shadow"] = False  # promote
    path.write_text(yaml.safe_dump(data))
    assert proxy.reload()
    assert not proxy.routing.table.rules[0].shadow

    data["clusters"]["us"] = {"bootstrap": "127.0.0.1:2"}
    data["routing"]["rules"].append({"match": {}, "cluster": "us"})
    path.write_text(yaml.safe_dump(data))
    assert not proxy.reload()  # a new cluster needs a restart: nothing changes
    assert len(proxy.routing.table.rules) == 1

    data["routing"]["rules"] = [{"match": {"headers": {"header": "x", "gt": "soon"}},
                                 "cluster": "eu"}]
    path.write_text(yaml.safe_dump(data))
    assert not proxy.reload()
    assert proxy.routing.table.rules[0].name == "eu"
