from pathlib import Path

import pytest
import yaml

from configuration import ConfigError, HostPort
from proxy.config.proxy_yaml import load_config, parse_config
from tests.support.links import link_scope

REPO = Path(__file__).resolve().parents[4]


def base() -> dict:
    return {
        "upstream": {"bootstrap": "127.0.0.1:9092"},
        "listen": {"bootstrap": "0.0.0.0:19092", "broker_port_base": 19100},
    }


def test_default_proxy_yaml_is_valid() -> None:
    config = load_config(REPO / "proxy.yaml")
    assert config.upstream.bootstrap == [HostPort("127.0.0.1", 9092)]
    assert config.listen.broker_port_base == 19100
    assert config.limits.max_frame_bytes == 100 * 1024 * 1024
    assert config.logging.level == "warning"
    # Causal links on, scoped for one Herald serving several services of one machine.
    assert link_scope(config.interceptors) == "client_id"


def test_bootstrap_accepts_a_list_or_comma_separated() -> None:
    doc = base()
    doc["upstream"]["bootstrap"] = "a:1,b:2"
    assert parse_config(doc).upstream.bootstrap == [HostPort("a", 1), HostPort("b", 2)]
    doc["upstream"]["bootstrap"] = ["a:1", "[::1]:3"]
    assert parse_config(doc).upstream.bootstrap == [HostPort("a", 1), HostPort("::1", 3)]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("upstream"), r"^upstream: required$"),
        (lambda d: d["upstream"].pop("bootstrap"), r"^upstream\.bootstrap: required$"),
        (lambda d: d["listen"].update(bootstrap="nohost"), r"^listen\.bootstrap: expected HOST"),
        (lambda d: d["listen"].update(broker_port_base="x"),
         r"^listen\.broker_port_base: expected int"),
        (lambda d: d["listen"].update(broker_port_base=70000),
         r"^listen\.broker_port_base: must be <= 65535"),
        (lambda d: d.update(limits={"max_frame_bytes": 10}),
         r"^limits\.max_frame_bytes: must be >= 1024"),
        (lambda d: d.update(limits={"max_in_flight": True}), r"^limits\.max_in_flight: expected"),
        (lambda d: d.update(logging={"level": "loud"}), r"^logging\.level: expected one of"),
        (lambda d: d["listen"].update(colour="blue"), r"^listen\.colour: unknown key$"),
        (lambda d: d.update(extra=1), r"^extra: unknown key$"),
        (lambda d: d.update(interceptors=[1]), r"^interceptors: expected a mapping$"),
    ],
)
def test_errors_name_the_yaml_path(mutate, message: str) -> None:  # noqa: ANN001
    doc = base()
    mutate(doc)
    with pytest.raises(ConfigError, match=message):
        parse_config(doc)


def test_unreadable_and_invalid_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("upstream: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(base()))
    assert load_config(good).source == good


def test_every_error_of_the_document_is_reported_not_only_the_first() -> None:
    doc = base()
    doc["upstream"].update(bootstrap="nohost", colour=1)
    doc["listen"].update(broker_port_base="x")
    doc["limits"] = {"max_frame_bytes": 10, "memory_budget_bytes": "lots", "idle": 1}
    doc["admin"] = {"topic_labels": ["ok", "bad topic", 3]}
    doc["logging"] = {"level": "loud", "format": "xml"}
    doc["shutdown"] = {"grace": 1}
    doc["extra"] = 1
    with pytest.raises(ConfigError) as info:
        parse_config(doc)
    assert [e.split(":")[0] for e in info.value.errors] == [
        "upstream.bootstrap", "upstream.colour", "listen.broker_port_base",
        "limits.max_frame_bytes", "limits.memory_budget_bytes", "limits.idle",
        "admin.topic_labels[1]", "admin.topic_labels[2]", "logging.level", "logging.format",
        "shutdown.grace", "extra",
    ]
    assert str(info.value) == "\n".join(info.value.errors)


def test_a_bad_value_is_reported_once_not_again_by_the_checks_that_use_it() -> None:
    """A wrong value is replaced by its default once recorded, so the checks that compare
    keys do not report it a second time."""
    doc = base()
    doc["limits"] = {"memory_budget_bytes": "lots", "max_batch_records": "many"}
    with pytest.raises(ConfigError) as info:
        parse_config(doc)
    assert info.value.errors == (
        "limits.max_batch_records: expected int, got 'many'",
        "limits.memory_budget_bytes: expected int, got 'lots'",
    )


def test_every_cluster_and_routing_rule_is_checked_after_a_bad_one() -> None:
    doc = base()
    doc["clusters"] = {"eu": {"bootstrap": "x"}, "us": ["bad"], "ap": {"bootstrap": "ap:1"}}
    doc["routing"] = {"rules": [
        {"match": {}, "cluster": "asia"},
        {"match": {}, "cluster": "eu", "name": "a"},  # a bad cluster is still a known name
        {"cluster": "ap"},
        {"match": {}, "cluster": "us", "name": "a"},
    ]}
    with pytest.raises(ConfigError) as info:
        parse_config(doc)
    assert info.value.errors == (
        "clusters.eu.bootstrap: expected HOST:PORT, got 'x'",
        "clusters.us: expected a mapping",
        "routing.rules[0].cluster: no cluster named 'asia' (known: ap, eu, upstream, us)",
        "routing.rules[2].match: required",
        "routing.rules[3].name: 'a' is used twice",
    )


def test_errors_of_the_interceptor_members_come_with_the_others() -> None:
    doc = base()
    doc["listen"]["colour"] = "blue"
    doc["interceptors"] = {"produce": [{"type": "insert_header", "value": "v"},
                                       {"type": "nope"}]}
    with pytest.raises(ConfigError) as info:
        parse_config(doc)
    assert [e.split(":")[0] for e in info.value.errors] == [
        "listen.colour", "interceptors.produce[0].header", "interceptors.produce[1].type"]
