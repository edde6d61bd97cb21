"""Building chains from the YAML structure, and errors that name the path of the bad key."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from interceptors import ConfigError, ConnectionInfo, ProxyInfo, build_chains
from interceptors.builtin import BUILTINS
from interceptors.testing import make_batch


def test_design_sketch_config_builds():
    spec = yaml.safe_load(textwrap.dedent("""
        produce:
          - type: trace_context        # W3C traceparent/tracestate, continue or start a trace
          - type: audit                # client id, principal, source, proxy id, cluster id...
          - type: insert_header
            header: app.id
            value: checkout
        fetch:
          - type: drop_headers
            headers: [internal.debug]
    """))
    chains = build_chains(spec, ProxyInfo(instance_id="p", cluster_id="c"))
    assert [m.name for m in chains.produce.members] == ["trace_context", "audit",
                                                        "insert_header"]
    assert [m.on_error for m in chains.produce.members] == ["pass", "reject", "pass"]
    assert [m.name for m in chains.fetch.members] == ["drop_headers"]
    b = make_batch([(None, b"v", [])])
    assert chains.produce.process("t", 0, [b], ConnectionInfo()).ok
    assert [k for k, _ in b.records[0].headers][0] == "traceparent"
    snapshot = chains.snapshot()
    assert snapshot["produce"]["members"][0]["records_seen"] == 1


def test_empty_config():
    for spec in (None, {}, {"produce": None, "fetch": []}):
        chains = build_chains(spec)
        assert len(chains.produce) == 0 and len(chains.fetch) == 0


def test_common_keys():
    chains = build_chains({"produce": [
        {"type": "insert_header", "header": "a", "value": "1", "name": "tag-eu",
         "topics": ["orders", "prefix:eu."], "client_ids": ["glob:svc-*"], "on_error": "reject"},
        {"type": "insert_header", "header": "b", "value": "2"},
        {"type": "insert_header", "header": "c", "value": "3"},
    ]})
    first, second, third = chains.produce.members
    assert (first.name, second.name, third.name) == ("tag-eu", "insert_header", "insert_header#2")
    assert first.on_error == "reject"
    assert first.applies("eu.x", "svc-1") and not first.applies("us.x", "svc-1")
    assert not first.applies("orders", "batch-job")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ([], "interceptors: expected a mapping with 'produce' and/or 'fetch'"),
        ({"consume": []}, "interceptors.consume: unknown key (known: produce, fetch)"),
        ({"produce": {"type": "audit"}}, "interceptors.produce: expected a list of interceptors"),
        ({"produce": ["audit"]}, "interceptors.produce[0]: expected a mapping with a 'type' key"),
        ({"produce": [{"header": "x"}]}, "interceptors.produce[0].type: required"),
        ({"produce": [{"type": 3}]}, "interceptors.produce[0].type: expected a non-empty string"),
        ({"fetch": [{"type": "drop_headers", "headers": ["a"]}, {"type": "x"}]},
         "interceptors.fetch[1].type: unknown interceptor 'x' (known: "
         + ", ".join(BUILTINS)),
        ({"produce": [{"type": "trace_context"}, {"type": "audit"},
                      {"type": "insert_header", "value": "v"}]},
         "interceptors.produce[2].header: required"),
        ({"produce": [{"type": "audit", "on_error": "drop"}]},
         "interceptors.produce[0].on_error: expected one of reject, pass on the produce path, "
         "got 'drop'"),
        ({"fetch": [{"type": "drop_headers", "headers": ["a"], "on_error": "reject"}]},
         "interceptors.fetch[0].on_error: expected one of pass, drop on the fetch path"),
        ({"produce": [{"type": "audit", "topics": "orders"}]},
         "interceptors.produce[0].topics: expected a list of names or patterns"),
        ({"produce": [{"type": "audit", "topics": []}]},
         "interceptors.produce[0].topics: must not be empty"),
        ({"produce": [{"type": "audit", "client_ids": ["a", "regex:[z"]}]},
         "interceptors.produce[0].client_ids[1]: invalid regex"),
        ({"produce": [{"type": "audit", "topics": ["prefix:"]}]},
         "interceptors.produce[0].topics[0]: empty pattern"),
        ({"produce": [{"type": "audit", "name": "a"}, {"type": "trace_context", "name": "a"}]},
         "interceptors.produce[1].name: 'a' is already used by interceptors.produce[0]"),
        ({"produce": [{"type": "audit", "forged": True}]},
         "interceptors.produce[0].forged: expected one of strip, reject, got True"),
        ({"produce": [{"type": "audit", "trusted": []}]},
         "interceptors.produce[0].trusted: expected a mapping, got a list"),
        ({"produce": [{"type": "audit", "fields": "client_id"}]},
         "interceptors.produce[0].fields: expected a list, got a string"),
        ({"produce": [{"type": "header_limits", "max_count": "3"}]},
         "interceptors.produce[0].max_count: expected an integer, got a string"),
        ({"produce": [{"type": "header_limits", "max_count": True}]},
         "interceptors.produce[0].max_count: expected an integer, got a boolean"),
        ({"produce": [{"type": "trace_context", "sampled": "yes"}]},
         "interceptors.produce[0].sampled: expected true or false, got a string"),
    ],
)
def test_errors_name_the_path(spec, message):
    with pytest.raises(ConfigError) as info:
        build_chains(spec)
    assert str(info.value).startswith(message), str(info.value)


def test_a_custom_root_path():
    with pytest.raises(ConfigError, match=r"^proxy\.interceptors\.produce\[0\]\.type: required"):
        build_chains({"produce": [{}]}, path="proxy.interceptors")


def test_name_patterns():
    from interceptors.patterns import NameMatcher

    m = NameMatcher(["orders", "prefix:pay.", "glob:log-?", "regex:(?i)AUDIT\\..*"])
    assert [m(n) for n in ("orders", "pay.eu", "log-1", "audit.x", "Audit.y")] == [True] * 5
    assert [m(n) for n in ("order", "xpay.eu", "log-12", "audit", "orders2")] == [False] * 5


def test_every_member_and_every_key_of_a_member_is_reported():
    with pytest.raises(ConfigError) as info:
        build_chains({
            "produce": [
                {"type": "insert_header", "value": 3, "colour": "x", "shadow": "no"},
                {"type": "audit", "forged": True, "on_error": "drop", "topics": []},
                {"type": "trace_context"},
            ],
            "fetch": [{"type": "x"}],
            "consume": [],
        })
    assert [e.split(":")[0] for e in info.value.errors] == [
        "interceptors.consume",
        "interceptors.produce[0].shadow",
        "interceptors.produce[0].colour",
        "interceptors.produce[0].header",
        "interceptors.produce[0].value",
        "interceptors.produce[1].topics",
        "interceptors.produce[1].on_error",
        "interceptors.produce[1].forged",
        "interceptors.fetch[0].type",
    ]


def test_build_config_reports_every_bad_item_of_a_list():
    from dataclasses import dataclass, field

    from configuration import build_config

    @dataclass
    class Settings:
        sizes: list[int] = field(default_factory=list)
        labels: dict[str, str] = field(default_factory=dict)

    with pytest.raises(ConfigError) as info:
        build_config(Settings, {"sizes": [1, "two", 3, None], "labels": {"a": 1, "b": "ok"}},
                     "x")
    assert info.value.errors == (
        "x.sizes[1]: expected an integer, got a string",
        "x.sizes[3]: expected an integer, got null",
        "x.labels.a: expected a string, got an integer",
    )
