"""W3C Trace Context / B3 formats and the trace_context interceptor."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from interceptors import ConnectionInfo, ProxyInfo, build_chains
from interceptors.testing import make_batch
from interceptors.tracing import (
    format_traceparent,
    parse_b3,
    parse_traceparent,
    parse_tracestate,
    valid_traceparent,
)

TP = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
CONN = ConnectionInfo(client_id="app")


@pytest.mark.parametrize(
    "value",
    [
        TP,
        b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
        b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09",  # unknown flags are kept
        # future versions: parsed leniently (version-00 fields, then the end or a dash)
        b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        b"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds",
    ],
)
def test_valid_traceparents(value):
    assert valid_traceparent(value)
    assert parse_traceparent(value) is not None


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"",
        b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff forbidden
        b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
        b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero parent id
        b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",  # uppercase
        b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # 00 is exactly 55
        b"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # short trace id
        b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",  # short parent id
        b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",  # short flags
        b"00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
        b"0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
        b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  # future: no dash after
        b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 ",
    ],
)
def test_invalid_traceparents(value):
    assert not valid_traceparent(value)
    assert parse_traceparent(value) is None


def test_parse_and_format_traceparent():
    tp = parse_traceparent(TP)
    assert (tp.version, tp.trace_id, tp.parent_id, tp.flags, tp.sampled) == (
        0, "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1, True)
    assert format_traceparent(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, True) == TP
    assert format_traceparent(1, 2, False) == b"00-%032x-%016x-00" % (1, 2)
    # ids out of range are written as they are (and make an invalid traceparent)
    assert format_traceparent(1 << 128, 2, True) == b"00-1" + b"0" * 32 + b"-%016x-01" % 2
    assert not valid_traceparent(format_traceparent(1 << 128, 2, True))


_REFERENCE = re.compile(rb"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-.*)?", re.S)


def reference_valid(v):
    """The W3C rules as plainly as they can be written."""
    m = v is not None and _REFERENCE.fullmatch(v)
    if not m:
        return False
    version, trace, parent, rest = m.groups()
    if version == b"ff" or (version == b"00" and rest is not None):
        return False
    return trace != b"0" * 32 and parent != b"0" * 16


def mutated(base: bytes):
    edits = st.lists(st.tuples(st.integers(0, 70), st.sampled_from(b"0af9AG-_ x\x00")),
                     max_size=3)
    cut = st.integers(50, 70)
    return st.builds(lambda e, c, tail: _apply(base, e)[:c] + tail, edits, cut,
                     st.sampled_from([b"", b"-", b"-x", b"x"]))


def _apply(base: bytes, edits) -> bytes:
    v = bytearray(base)
    for pos, byte in edits:
        if pos < len(v):
            v[pos] = byte
    return bytes(v)


@given(st.one_of(
    mutated(TP),
    mutated(b"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
    mutated(b"00-00000000000000000000000000000000-0000000000000000-01"),
    st.binary(max_size=70),
))
def test_traceparent_check_follows_the_spec(value):
    assert valid_traceparent(value) == reference_valid(value)


@pytest.mark.parametrize(
    ("value", "members"),
    [
        (b"congo=t61rcWkgMzE", [("congo", "t61rcWkgMzE")]),
        (b"rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
         [("rojo", "00f067aa0ba902b7"), ("congo", "t61rcWkgMzE")]),
        (b"", []),
        (b" , ,\t", []),  # empty and whitespace-only members are allowed
        (b"a=1 ,  b=2", [("a", "1"), ("b", "2")]),
        (b"tenant1@vendor=x", [("tenant1@vendor", "x")]),
        (b"k_-*/z=  leading spaces kept", [("k_-*/z", "  leading spaces kept")]),
        (b",".join(b"k%d=v" % i for i in range(32)), [(f"k{i}", "v") for i in range(32)]),
    ],
)
def test_valid_tracestates(value, members):
    assert parse_tracestate(value) == members


@pytest.mark.parametrize(
    "value",
    [
        b",".join(b"k%d=v" % i for i in range(33)),  # more than 32 members
        b"Upper=1",
        b"1abc=1",  # a simple key starts with a letter
        b"a=1,a=2",  # a key appears once
        b"a=b=c",
        b"a=",
        b"a=x,y",
        b"a=tab\there",
        b"@vendor=1",
        b"tenant@1vendor=1",
        b"t@systemtoolongname=1",
        b"k=" + b"v" * 257,
        b"k=\xff",
    ],
)
def test_invalid_tracestates(value):
    assert parse_tracestate(value) is None


def test_b3_single_header():
    b3 = parse_b3(b"80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1-05e3ac9a4f6e3b90")
    assert (b3.trace_id, b3.span_id, b3.sampled, b3.parent_span_id) == (
        "80f198ee56343ba864fe8b2a57d3eff7", "e457b5a2e4d86bd1", True, "05e3ac9a4f6e3b90")
    short = parse_b3(b"64fe8b2a57d3eff7-e457b5a2e4d86bd1-d")
    assert short.trace_id == "000000000000000064fe8b2a57d3eff7"
    assert short.debug and short.sampled
    assert parse_b3(b"64fe8b2a57d3eff7-e457b5a2e4d86bd1").sampled is None
    assert parse_b3(b"0").sampled is False and parse_b3(b"0").trace_id is None
    for bad in (b"x", b"64fe8b2a57d3eff7", b"64fe8b2a57d3eff7-e457b5a2e4d86bd1-2",
                b"0000000000000000-e457b5a2e4d86bd1", b"64FE8B2A57D3EFF7-e457b5a2e4d86bd1",
                b"64fe8b2a57d3eff7-e457b5a2e4d86bd1-1-xyz", b"a-b-c-d-e"):
        assert parse_b3(bad) is None, bad


# -- the interceptor ---------------------------------------------------------------------


def chain(**config):
    return build_chains({"produce": [{"type": "trace_context", **config}]},
                        ProxyInfo(instance_id="p")).produce


def run(config, *headers_per_record):
    b = make_batch([(None, b"v", h) for h in headers_per_record])
    c = chain(**config)
    outcome = c.process("orders", 2, [b], CONN)
    return b, outcome, c.stats.members["trace_context"]


def test_valid_context_is_kept_unchanged_with_its_tracestate():
    b, outcome, _ = run({}, [("traceparent", TP), ("tracestate", b"INVALID STATE")])
    assert not b.modified
    assert outcome.traces == ()


def test_invalid_tracestate_is_counted_not_touched():
    _, _, st = run({}, [("traceparent", TP), ("tracestate", b"a=1,a=2")])
    assert st.events == {"tracestate_invalid": 1}


def test_records_without_context_get_a_new_one_each():
    b, outcome, st = run({}, [], [("tracestate", b"orphan=1")], [("traceparent", b"junk")])
    values = [r.headers for r in b.records]
    tps = [dict(h)["traceparent"] for h in values]
    assert all(valid_traceparent(tp) and tp.endswith(b"-01") for tp in tps)
    assert len(set(tps)) == 3
    assert all("tracestate" not in dict(h) for h in values)  # restart drops the old state
    assert values[2][0][0] == "traceparent"  # replaced in place
    assert [t.source for t in outcome.traces] == ["new"] * 3
    trace = outcome.traces[0]
    assert tps[0] == b"00-%032x-%016x-01" % (trace.trace_id, trace.span_id)
    assert (trace.topic, trace.partition, trace.parent_span_id) == ("orders", 2, None)
    assert st.events == {"trace_new_context": 3, "traceparent_invalid": 1}


def test_batch_mode_shares_one_new_context_per_batch():
    b, outcome, _ = run({"mode": "batch", "sampled": False}, [], [], [("traceparent", TP)])
    tps = [dict(r.headers)["traceparent"] for r in b.records]
    assert tps[0] == tps[1] != tps[2] == TP
    assert tps[0].endswith(b"-00")
    assert len(outcome.traces) == 1


def test_duplicate_traceparents_collapse_to_the_first_valid():
    other = b"00-11111111111111111111111111111111-2222222222222222-01"
    b, _, st = run({}, [("traceparent", b"bad"), ("x", b"1"), ("traceparent", other),
                        ("traceparent", TP)])
    assert b.records[0].headers == [("traceparent", other), ("x", b"1")]
    assert st.events == {"traceparent_collapsed": 1}


def test_b3_becomes_the_parent_when_there_is_no_traceparent():
    b3 = b"80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-0-05e3ac9a4f6e3b90"
    b, outcome, _ = run({"b3_read": True}, [("b3", b3)])
    assert dict(b.records[0].headers)["traceparent"] == (
        b"00-80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-00")
    (trace,) = outcome.traces
    assert (trace.source, trace.span_id, trace.parent_span_id, trace.sampled) == (
        "b3", 0xE457B5A2E4D86BD1, 0x05E3AC9A4F6E3B90, False)


def test_b3_is_ignored_unless_enabled_and_a_valid_traceparent_wins():
    b3 = b"80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1"
    b, _, _ = run({}, [("b3", b3)])
    assert b"80f198ee" not in dict(b.records[0].headers)["traceparent"]
    b, _, _ = run({"b3_read": True}, [("b3", b3), ("traceparent", TP)])
    assert not b.modified


def test_b3_sampling_only_header_sets_the_flag():
    b, _, _ = run({"b3_read": True}, [("b3", b"0")])
    assert dict(b.records[0].headers)["traceparent"].endswith(b"-00")


def test_b3_write_and_trace_id_copies():
    b, _, _ = run({"b3_write": True, "trace_id_headers": ["X-Trace-Id"]}, [("traceparent", TP)],
                  [("b3", b"garbage")])
    kept = dict(b.records[0].headers)
    assert kept["b3"] == b"4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1"
    assert kept["X-Trace-Id"] == b"4bf92f3577b34da6a3ce929d0e0e4736"
    new = dict(b.records[1].headers)
    tp = new["traceparent"]
    assert new["b3"] == tp[3:35] + b"-" + tp[36:52] + b"-1"
    assert new["X-Trace-Id"] == tp[3:35]


def test_generated_ids_are_never_zero(monkeypatch):
    import interceptors.ids as ids

    draws = iter([0, 1 << 64, 5, (7 << 64) | 9])

    class Draws:
        def getrandbits(self, bits):
            return next(draws)

    monkeypatch.setattr(ids, "_trace_random", Draws())
    assert ids.new_trace_ids() == (7, 9)


def test_config_checks():
    from interceptors import ConfigError

    with pytest.raises(ConfigError, match=r"produce\[0\]\.mode: expected one of record, batch"):
        chain(mode="span")
    with pytest.raises(ConfigError, match=r"trace_id_headers\[0\]: cannot use 'traceparent'"):
        chain(trace_id_headers=["traceparent"])
    with pytest.raises(ConfigError, match=r"fetch\[0\]\.type: 'trace_context' runs on the "
                                          r"produce path only"):
        build_chains({"fetch": [{"type": "trace_context"}]})
