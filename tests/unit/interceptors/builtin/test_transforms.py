"""KIP-145 style transforms: insert_header, drop_headers, rename_header, header_from/to."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest

from interceptors import ConfigError, ConnectionInfo, ProxyInfo, build_chains
from interceptors.testing import make_batch

ENV = ProxyInfo(instance_id="p", clock=lambda: 1_495_384_265.387)
CONN = ConnectionInfo(client_id="shop")


def run(member, records, path="produce", topic="orders", partition=3):
    chains = build_chains({path: [member]}, ENV)
    chain = getattr(chains, path)
    b = make_batch(records)
    outcome = chain.process(topic, partition, [b], CONN)
    assert outcome is None or outcome.ok
    return b.records, chain.stats.members[member.get("name", member["type"])]


def headers(records, i=0):
    return records[i].headers


# -- insert_header ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"value": "checkout"}, b"checkout"),
        ({"value": "true"}, b"true"),  # a literal is written as is
        ({"typed": 42}, b"42"),
        ({"typed": True}, b"true"),
        ({"typed": "true"}, b'"true"'),  # a typed string that reads as a boolean is quoted
        ({"typed": [1, "a"]}, b'[1,"a"]'),
        ({"typed": {"k": None}}, b'{"k":null}'),
        ({"typed": dt.date(2017, 5, 21)}, b"2017-05-21"),  # YAML gives dates as objects
        ({"typed": None}, None),
        ({"template": "{client_id}/{topic}/{partition}"}, b"shop/orders/3"),
        ({"template": "{time_ms} {now_iso}"}, b"1495384265387 2017-05-21T16:31:05.387Z"),
        ({"template": "{{literal}}"}, b"{literal}"),
    ],
)
def test_insert_header_values(config, expected):
    records, _ = run({"type": "insert_header", "header": "h", **config}, [(None, None, [])])
    assert headers(records) == [("h", expected)]


def test_insert_header_env_and_uuid_templates(monkeypatch):
    monkeypatch.setenv("REGION", "eu-west-1")
    records, _ = run({"type": "insert_header", "header": "h", "template": "{env:REGION}:{uuid}"},
                     [(None, None, []), (None, None, [])])
    values = [dict(r.headers)["h"].decode() for r in records]
    assert all(v.startswith("eu-west-1:") for v in values)
    ids = [uuid.UUID(v.split(":", 1)[1]) for v in values]
    assert ids[0] != ids[1] and ids[0].version == 4


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("set", [("h", b"new"), ("x", b"1")]),
        ("add", [("h", b"old"), ("x", b"1"), ("h", b"old2"), ("h", b"new")]),
        ("if_absent", [("h", b"old"), ("x", b"1"), ("h", b"old2")]),
    ],
)
def test_insert_header_modes(mode, expected):
    records, _ = run({"type": "insert_header", "header": "h", "value": "new", "mode": mode},
                     [(None, None, [("h", b"old"), ("x", b"1"), ("h", b"old2")])])
    assert headers(records) == expected


def test_insert_header_if_absent_adds_when_missing():
    records, _ = run({"type": "insert_header", "header": "h", "value": "v", "mode": "if_absent"},
                     [(None, None, [])])
    assert headers(records) == [("h", b"v")]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, r"produce\[0\]\.header: required"),
        ({"header": "h"}, r"produce\[0\]\.value: give exactly one of value, typed, template"),
        ({"header": "h", "value": "a", "template": "b"}, r"produce\[0\]\.template: give exactly"),
        ({"header": "h", "template": "{nope}"}, r"produce\[0\]\.template: unknown placeholder"),
        ({"header": "h", "template": "{topic!r}"}, r"unknown placeholder \{topic!r\}"),
        ({"header": "h", "template": "{env:HERALD_SURELY_UNSET}"},
         r"environment variable HERALD_SURELY_UNSET is not set"),
        ({"header": "h", "template": "{"}, r"produce\[0\]\.template: "),
        ({"header": "h", "value": 5}, r"produce\[0\]\.value: expected a string, got an integer"),
        ({"header": "h", "value": "v", "mode": "replace"}, r"produce\[0\]\.mode: expected one"),
        ({"header": "h", "value": "v", "heder": 1},
         r"produce\[0\]\.heder: unknown key \(known: type, name, topics, client_ids, on_error, "
         r"shadow, header, value, typed, template, mode\)"),
    ],
)
def test_insert_header_config_errors(config, message):
    with pytest.raises(ConfigError, match=message):
        build_chains({"produce": [{"type": "insert_header", **config}]}, ENV)


# -- drop_headers / rename_header ---------------------------------------------------------


@pytest.mark.parametrize("path", ["produce", "fetch"])
def test_drop_headers_by_name_and_pattern(path):
    records, _ = run(
        {"type": "drop_headers",
         "headers": ["internal.debug", "glob:tmp.*", "regex:x-[0-9]+", "prefix:secret/"]},
        [(None, None, [("internal.debug", b"1"), ("keep", b"2"), ("tmp.a", None),
                       ("x-12", b""), ("x-12b", b""), ("secret/k", b""), ("Internal.debug", b"")])],
        path=path,
    )
    assert headers(records) == [("keep", b"2"), ("x-12b", b""), ("Internal.debug", b"")]


def test_drop_headers_leaves_other_records_unmodified():
    records, st = run({"type": "drop_headers", "headers": ["a"]},
                      [(None, None, [("b", b"1")]), (None, None, [("a", b"1")])])
    assert records[0].assignments == [] and records[1].assignments == ["headers"]
    assert st.records_changed == 1


def test_rename_header():
    records, _ = run({"type": "rename_header", "from": "old", "to": "new"},
                     [(None, None, [("old", b"1"), ("x", None), ("old", b"2")])])
    assert headers(records) == [("new", b"1"), ("x", None), ("new", b"2")]


def test_rename_header_config():
    with pytest.raises(ConfigError, match=r"produce\[0\]\.to: is the same as 'from'"):
        build_chains({"produce": [{"type": "rename_header", "from": "a", "to": "a"}]})
    with pytest.raises(ConfigError, match=r"produce\[0\]\.from: required"):
        build_chains({"produce": [{"type": "rename_header", "to": "a"}]})


# -- header_from / header_to --------------------------------------------------------------

ORDER = json.dumps({"txnId": "t-1", "address": {"city": "Oslo", "zip": "0150"},
                    "items": [{"sku": 5}], "total": 12.5, "paid": True}).encode()


def test_header_from_copies_fields():
    records, _ = run(
        {"type": "header_from", "fields": ["txnId", "address.zip", "items.0.sku", "total",
                                           "paid", "address"],
         "headers": ["txn.id", "zip", "sku", "total", "paid", "addr"]},
        [(None, ORDER, [("txn.id", b"stale")])],
    )
    assert dict(headers(records)) == {
        "txn.id": b"t-1", "zip": b"0150", "sku": b"5", "total": b"12.5", "paid": b"true",
        "addr": b'{"city":"Oslo","zip":"0150"}',
    }
    assert records[0].value == ORDER and records[0].assignments == ["headers"]


def test_header_from_moves_fields():
    records, _ = run({"type": "header_from", "fields": ["txnId", "address.city"],
                      "headers": ["txn.id", "city"], "operation": "move"},
                     [(None, ORDER, [])])
    assert json.loads(records[0].value) == {"address": {"zip": "0150"}, "items": [{"sku": 5}],
                                            "total": 12.5, "paid": True}
    assert dict(headers(records)) == {"txn.id": b"t-1", "city": b"Oslo"}


def test_header_from_key():
    records, _ = run({"type": "header_from", "fields": ["id"], "headers": ["key.id"],
                      "source": "key", "operation": "move"},
                     [(b'{"id": 7, "x": 1}', b"not json", [])])
    assert headers(records) == [("key.id", b"7")]
    assert json.loads(records[0].key) == {"x": 1}


def test_header_from_skips_what_is_not_there():
    records, st = run({"type": "header_from", "fields": ["missing"], "headers": ["h"]},
                      [(None, ORDER, []), (None, b"plain text", []), (None, None, []),
                       (None, b"[1, 2]", [])])
    assert not any(r.modified for r in records)
    assert st.events == {"field_missing": 1, "not_json": 3}


def test_header_to_copies_typed_headers_into_the_value():
    records, _ = run(
        {"type": "header_to", "headers": ["txn.id", "n", "flag", "when", "tags", "raw"],
         "fields": ["meta.txn", "meta.n", "flag", "when", "tags", "raw"]},
        [(None, b'{"a": 1}', [("txn.id", b"t-9"), ("n", b"42"), ("flag", b"false"),
                             ("when", b"2017-05-21"), ("tags", b'["x","y"]'),
                             ("raw", b"\xff")])],
    )
    assert json.loads(records[0].value) == {
        "a": 1, "meta": {"txn": "t-9", "n": 42}, "flag": False, "when": "2017-05-21",
        "tags": ["x", "y"], "raw": "/w==",
    }
    assert len(headers(records)) == 6  # copy keeps the headers


def test_header_to_move_removes_the_headers():
    records, _ = run({"type": "header_to", "headers": ["h"], "fields": ["h"],
                      "operation": "move"},
                     [(None, b"{}", [("h", b"1"), ("other", b"2")]),
                      (None, b"{}", [("other", b"2")])])
    assert headers(records) == [("other", b"2")]
    assert json.loads(records[0].value) == {"h": 1}
    assert records[1].assignments == []  # no header to move: untouched


def test_header_to_blocked_path_leaves_the_record():
    records, st = run({"type": "header_to", "headers": ["h"], "fields": ["a.b"]},
                      [(None, b'{"a": 5}', [("h", b"1")])])
    assert not records[0].modified and st.events == {"field_blocked": 1}


def test_field_mapping_config_errors():
    with pytest.raises(ConfigError, match=r"produce\[0\]\.headers: needs one header per field"):
        build_chains({"produce": [{"type": "header_from", "fields": ["a", "b"],
                                   "headers": ["h"]}]})
    with pytest.raises(ConfigError, match=r"produce\[0\]\.fields\[0\]: invalid field path"):
        build_chains({"produce": [{"type": "header_to", "fields": ["a..b"], "headers": ["h"]}]})
    with pytest.raises(ConfigError, match=r"fetch\[0\]\.operation: expected one of copy, move"):
        build_chains({"fetch": [{"type": "header_to", "fields": ["a"], "headers": ["h"],
                                 "operation": "cut"}]})
