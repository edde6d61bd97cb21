"""protocol/contracts: the generated tables say what Kafka says, the hand-written names are the
ones their producers and consumers use, and protocol imports nothing of Herald's."""

from __future__ import annotations

import ast
import json
import pathlib
import re

import pytest

import interceptors
from interceptors import errors as interceptor_errors
from interceptors.builtin import audit
from protocol.codegen.contracts import FEATURES, feature_versions, first_version
from protocol.codegen.jars import parse_error_codes
from protocol.codegen.model import SpecError
from protocol.contracts import features, fetch_log, headers, kafka_errors
from protocol.messages.fetch_response import FetchResponse
from protocol.messages.produce_request import ProduceRequest
from proxy.devtools.codegen import load_messages, pinned_libs, render_all
from proxy.routing import rules

REPO = pathlib.Path(__file__).resolve().parents[4]
GENERATED = ("protocol/contracts/features.py", "protocol/contracts/features.h",
             "protocol/contracts/kafka_errors.py")


def test_generated_contracts_are_committed() -> None:
    files = render_all()
    for rel in GENERATED:
        assert files[rel] == (REPO / rel).read_text(encoding="utf-8"), rel


def test_error_codes_are_kafkas() -> None:
    assert (kafka_errors.NONE, kafka_errors.UNKNOWN_SERVER_ERROR) == (0, -1)
    assert kafka_errors.INVALID_RECORD == 87 and kafka_errors.UNKNOWN_TOPIC_ID == 100
    codes = sorted(kafka_errors.ERRORS)
    assert codes == list(range(-1, codes[-1] + 1)), "Kafka's codes run without gaps"
    for code, error in kafka_errors.ERRORS.items():
        assert error.code == code and getattr(kafka_errors, error.name) == code
    assert kafka_errors.ERRORS[kafka_errors.REQUEST_TIMED_OUT].retriable
    assert not kafka_errors.ERRORS[kafka_errors.INVALID_RECORD].retriable
    assert kafka_errors.error_name(10) == "MESSAGE_TOO_LARGE"
    assert kafka_errors.error_name(30_000) == "30000"


def test_error_code_lines_are_checked() -> None:
    good = "87\tINVALID_RECORD\tfalse\tThis record has failed the validation on broker.\n"
    assert parse_error_codes(good) == [(87, "INVALID_RECORD", False,
                                        "This record has failed the validation on broker.")]
    for bad in ("87\tINVALID RECORD\tfalse\tx", "87\tINVALID_RECORD\tmaybe\tx", "",
                good + good, "x\tNONE\tfalse\tNONE"):
        with pytest.raises(ValueError):
            parse_error_codes(bad)


def test_interceptors_export_the_generated_codes() -> None:
    assert interceptors.INVALID_RECORD is kafka_errors.INVALID_RECORD
    assert interceptors.UNKNOWN_SERVER_ERROR is kafka_errors.UNKNOWN_SERVER_ERROR
    assert interceptor_errors.NONE is kafka_errors.NONE
    assert interceptors.RejectRecord().error_code == kafka_errors.INVALID_RECORD


def test_features_follow_the_specs() -> None:
    assert feature_versions(pinned_libs()) == {f.name: getattr(features, f.name)
                                               for f in FEATURES}
    assert features.TOPIC_ID_VERSION == 13
    assert features.PRODUCE_NODE_ENDPOINTS_VERSION == 10
    assert features.FETCH_NODE_ENDPOINTS_VERSION == 16
    # The generated codecs agree: the field is there from that version on, not before.
    v = features.TOPIC_ID_VERSION
    assert ProduceRequest.MIN_VERSION < v <= ProduceRequest.MAX_VERSION
    fetch = load_messages()["FetchResponse"]
    names = [f.cf.py_name for f in fetch.layout(features.FETCH_NODE_ENDPOINTS_VERSION).fields]
    assert "node_endpoints" in names
    before = fetch.layout(features.FETCH_NODE_ENDPOINTS_VERSION - 1).fields
    assert "node_endpoints" not in [f.cf.py_name for f in before]
    assert FetchResponse.FLEXIBLE_MIN_VERSION < v


def test_the_c_header_has_the_same_constants() -> None:
    text = (REPO / "protocol/contracts/features.h").read_text(encoding="utf-8")
    macros = {name: int(v) for name, v in re.findall(r"#define (\w+_VERSION) (\d+)", text)}
    assert macros == {f.name: getattr(features, f.name) for f in FEATURES}


def test_a_threshold_must_hold_to_the_newest_version() -> None:
    messages = load_messages()
    assert first_version(messages, "ProduceRequest.TopicData.TopicId") == 13
    assert first_version(messages, "FetchResponse.flexibleVersions") == 12
    assert features.PRODUCE_FLEXIBLE_VERSION == ProduceRequest.FLEXIBLE_MIN_VERSION
    with pytest.raises(SpecError, match="not in every version"):
        first_version(messages, "ProduceRequest.TopicData.Name")  # v0-12 only
    with pytest.raises(SpecError, match="in no version"):
        first_version(messages, "ProduceRequest.NoSuchField")


def test_header_names() -> None:
    assert headers.ROUTE_ORIGIN == "herald.route.origin"
    assert rules.ORIGIN_HEADER is headers.ROUTE_ORIGIN
    assert headers.audit_header(headers.AUDIT_TIME) == "herald.time"
    assert headers.audit_header(headers.AUDIT_MSG_ID, "x-") == "x-msg_id"
    assert set(headers.AUDIT_MESSAGE_FIELDS) <= set(headers.AUDIT_FIELDS)
    assert audit.FIELDS == headers.AUDIT_FIELDS
    assert audit.AuditConfig().prefix == headers.RESERVED_PREFIX
    assert (headers.TRACEPARENT, headers.TRACESTATE, headers.B3) == ("traceparent", "tracestate",
                                                                     "b3")


def test_fetch_log_layout_round_trips() -> None:
    tail = fetch_log.batch_tail('or"ders', 3, "consumer-1", None, 1_700_000_000_000,
                                "[fd00::7]")
    traced = json.loads(fetch_log.observation("ab" * 16, 42, tail, b"1699999999990"))
    untraced = json.loads(fetch_log.observation(None, 43, tail))
    keys = [key for key, _ in fetch_log.FIELDS]
    assert sorted(traced) == sorted(untraced) == sorted(keys)
    assert traced == {fetch_log.TRACE_ID: "ab" * 16, fetch_log.TOPIC: 'or"ders',
                      fetch_log.PARTITION: 3, fetch_log.OFFSET: 42,
                      fetch_log.CONSUMER: "consumer-1", fetch_log.GROUP: None,
                      fetch_log.FETCHED_MS: 1_700_000_000_000,
                      fetch_log.RECORD_MS: 1_699_999_999_990,
                      fetch_log.CONSUMER_HOST: "[fd00::7]"}
    assert untraced[fetch_log.TRACE_ID] is None and untraced[fetch_log.OFFSET] == 43
    assert untraced[fetch_log.RECORD_MS] is None
    # Without a host (a consumer Herald saw no address for), `s` is null, as in the
    # observations written before it existed.
    assert json.loads(fetch_log.observation(None, 1, fetch_log.batch_tail(
        "t", 0, "c", "g", 1)))[fetch_log.CONSUMER_HOST] is None
    assert fetch_log.SPARK_SCHEMA.split(", ") == [f"{k} {t}" for k, t in fetch_log.FIELDS]


def test_fetch_log_record_time_is_a_long_or_null() -> None:
    """`h` is the time header's digits when they are a decimal integer a long holds; anything
    else (absent, empty, signed, spaced, fractional, too long, not ASCII) is null, never text
    that would make the observation unreadable."""
    tail = fetch_log.batch_tail("t", 0, "c", "g", 1)
    for raw, want in ((b"0", 0), (b"1780000000000", 1_780_000_000_000),
                      (b"9" * 18, int("9" * 18)), (None, None), (b"", None), (b"-5", None),
                      (b" 12", None), (b"1.5", None), (b"12a", None), (b"9" * 19, None),
                      ("١٢".encode(), None), (b'1,"x":2', None)):
        obs = json.loads(fetch_log.observation(None, 7, tail, raw))
        assert obs[fetch_log.RECORD_MS] == want, raw
        assert obs[fetch_log.OFFSET] == 7 and obs[fetch_log.TOPIC] == "t"


def test_protocol_imports_nothing_of_heralds() -> None:
    others = {"interceptors", "proxy", "pipeline"}
    found = []
    for path in (REPO / "protocol").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found += [f"{path.relative_to(REPO)}: {n}" for n in names
                      if n.split(".")[0] in others]
    assert not found
