"""Routing actions as registered classes: what each reads from a rule, the errors its settings
give (naming the YAML path), and a new action going through parsing and the produce filter
with no change to either."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry

from configuration import ConfigError, Node
from protocol.records import Record, RecordBatch, build_batch
from proxy.routing.actions import ACTIONS
from proxy.routing.actions.api import PRIMARY, Route, RuleSite, Target
from proxy.routing.arrival import PartitionArrival
from proxy.routing.config import parse_routing
from proxy.routing.produce_filter import RoutingFilter, _Refuse
from proxy.routing.rules import RoutingTable
from proxy.routing.stats import RoutingStats
from proxy.upstream.topic_ids import TopicIds
from tests.support.routing_config import config, error


def test_every_registered_action_declares_its_settings_and_owns_its_keys() -> None:
    owners: dict[str, str] = {}
    for name, cls in ACTIONS.items():
        assert cls.name == name
        assert dataclasses.is_dataclass(cls.Settings)
        assert cls.selects and set(cls.selects) <= set(cls.keys())
        for key in cls.keys():
            assert key not in ("name", "match", "shadow"), (name, key)
            assert owners.setdefault(key, name) == name, f"{key} read by {owners[key]} and {name}"
    assert set(ACTIONS) == {"move", "mirror", "reject"}


@pytest.mark.parametrize(("rule", "expected"), [
    ({"mirror": {"cluster": "asia"}}, "routing.rules[0].mirror.cluster: no cluster named 'asia'"),
    ({"mirror": "eu"}, "routing.rules[0].mirror: expected a mapping"),
    ({"mirror": {"cluster": "eu", "colour": "red"}}, "routing.rules[0].mirror.colour: unknown key"),
    ({"mirror": {"cluster": "eu", "partition": "hash"}},
     "routing.rules[0].mirror.partition: expected same, key or a partition number >= 0"),
    ({"mirror": {"cluster": "eu"}, "partition": 1}, "routing.rules[0].partition: unknown key"),
    ({"cluster": "eu", "topic": ""}, "routing.rules[0].topic: expected a topic name"),
    ({"cluster": "eu", "partition": True}, "routing.rules[0].partition: expected same, key"),
    ({"reject": False}, "routing.rules[0].reject: expected true or a message"),
    ({"reject": ""}, "routing.rules[0].reject: expected true or a message"),
    ({"reject": 3}, "routing.rules[0].reject: expected a string"),
    ({"mirror": {"cluster": "eu"}, "reject": True},
     "routing.rules[0]: expected one action: cluster/topic (move), mirror or reject "
     "(got mirror, reject)"),
    ({"partition": 2}, "routing.rules[0]: expected one action: cluster/topic (move), mirror or "
                       "reject (got none)"),
])
def test_action_settings_errors_name_the_yaml_path(rule: dict, expected: str) -> None:
    assert error([{"match": {}, **rule}]).startswith(expected)


def test_each_action_keeps_what_its_rule_says() -> None:
    move, mirror, reject, named = config([
        {"match": {}, "cluster": "eu", "partition": 4},
        {"match": {}, "mirror": {"topic": "copies", "partition": "key"}},
        {"name": "strict", "match": {}, "reject": True},
        {"match": {}, "reject": "not here"},
    ]).routing.rules
    assert (move.action, move.target) == ("move", Target("eu", None, 4))
    assert (mirror.action, mirror.target) == ("mirror", Target(PRIMARY, "copies", "key"))
    assert (reject.action, reject.target, reject.message) == (
        "reject", None, "refused by routing rule strict")
    assert named.message == "not here"


# --- a new action: one class and its registration --------------------------------------------

@dataclass
class QuarantineSettings:
    quarantine: str  # the topic, on the primary cluster


class Quarantine(Route):
    """Moves records to a quarantine topic of the primary cluster, keeping their partition."""

    name = "quarantine"
    selects = ("quarantine",)
    Settings = QuarantineSettings
    keep = False

    def __init__(self, settings: QuarantineSettings, site: RuleSite) -> None:
        super().__init__(settings, site)
        self.target = Target(PRIMARY, settings.quarantine, "same")


WITH_QUARANTINE = {**ACTIONS, "quarantine": Quarantine}


def routing(rules: list, actions: dict | None = None) -> RoutingTable:
    node = Node({"rules": rules}, "routing")
    return RoutingTable(parse_routing(node, {"eu"}, actions or WITH_QUARANTINE))


def test_a_registered_action_is_parsed_and_applied_without_a_branch_for_it() -> None:
    table = routing([
        {"name": "bad", "match": {"headers": {"header": "bad", "present": True}},
         "quarantine": "held"},
        {"name": "pii", "match": {"headers": {"header": "pii", "present": True}},
         "reject": "no pii"},
    ])
    bad = table.rules[0]
    assert (bad.action, bad.target) == ("quarantine", Target(PRIMARY, "held", "same"))
    assert table.config.clusters() == {PRIMARY}

    f = RoutingFilter(table, TopicIds(), {}, RoutingStats(CollectorRegistry()))
    batch = RecordBatch(build_batch([Record(b"k", b"v%d" % i, [("bad", b"")] if i % 2 else [])
                                     for i in range(6)]))
    candidates = table.candidates("t", None)
    plan = f._plan(batch, candidates, PartitionArrival(table.seal).batch(0, batch))
    (routed,) = plan.routed
    assert (routed.rule.name, routed.cluster, routed.indexes) == ("bad", PRIMARY, [1, 3, 5])
    assert plan.moved == frozenset({1, 3, 5})

    refused = RecordBatch(build_batch([Record(b"k", b"v", [("pii", b"")])]))
    with pytest.raises(_Refuse) as info:
        f._plan(refused, candidates, PartitionArrival(table.seal).batch(0, refused))
    assert info.value.outcome.error_message == "no pii"


def test_a_new_actions_settings_are_checked_with_their_path() -> None:
    with pytest.raises(ConfigError) as info:
        routing([{"match": {}, "quarantine": 5}])
    assert str(info.value).startswith("routing.rules[0].quarantine: expected a string")
    with pytest.raises(ConfigError) as info:
        routing([{"match": {}, "quarantine": "held"}], ACTIONS)
    assert str(info.value).startswith("routing.rules[0]: expected one action")
