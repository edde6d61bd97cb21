"""The append path: stamping members skip the Headers wrapper on records they need not look at.

Whatever path a record takes, the outcome must be the full path's: the same headers in the
same order, the same bytes, the same counters and traces. Each test runs a chain twice, once
as configured and once with every member made to take the full path, from the same random
state, and compares everything observable.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from interceptors import (
    UNKNOWN_SERVER_ERROR,
    ChainMember,
    ConnectionInfo,
    FetchChain,
    ProduceChain,
    ProxyInfo,
    build_chains,
    ids,
)
from interceptors.testing import make_batch
from protocol.compression import LZ4, NONE
from protocol.records import Record, build_batch, join_batches, split_batches

NOW = 1_700_000_000.123
TP = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
CONNS = [
    ConnectionInfo(client_id="app", address="10.0.0.1:4000"),
    ConnectionInfo(client_id="mirror-1", principal="User:mirror"),
    ConnectionInfo(),
]


def env() -> ProxyInfo:
    return ProxyInfo(instance_id="herald-1", cluster_id="c1", clock=lambda: NOW)


def full_path(chain):
    """The same chain (new members), but every record takes the record path."""
    members = []
    for m in chain.members:
        cls = type(m.interceptor)
        members.append(ChainMember(m.name, cls(m.interceptor.config, m.interceptor.env),
                                   m.topics, m.client_ids, m.on_error, m.type))
    return type(chain)(members, fast_paths=False)


def plan(chain, topic="t", client_id="app"):
    return chain._plan(topic, client_id)


def run_real(chain, record_headers, conn, seed, codec=NONE):
    """Run `chain` over a real batch; everything observable about it."""
    raw = build_batch([Record(None, b"v" * (i % 3 * 100), h) for i, h in enumerate(record_headers)],
                      compression=codec, base_timestamp=1, producer_id=1, producer_epoch=0,
                      base_sequence=0)
    batches = split_batches(raw)
    random.seed(seed)
    ids.seed(seed)
    outcome = chain.process("t", 0, batches, conn)
    out = join_batches(batches) if outcome.ok else None
    return outcome, out, [r.headers for r in batches[0].records], chain.stats.snapshot()


def run_fake(chain, record_headers, conn, seed):
    batch = make_batch([(None, b"v", h) for h in record_headers])
    random.seed(seed)
    ids.seed(seed)
    outcome = chain.process("t", 0, [batch], conn)
    return (outcome, batch.modified, [(r.headers, r.assignments) for r in batch._records],
            chain.stats.snapshot())


PRODUCE_MEMBERS = [
    {"type": "trace_context"},
    {"type": "trace_context", "mode": "batch", "sampled": False},
    {"type": "audit"},
    {"type": "audit", "fields": ["msg_id", "client_id"], "prefix": "x."},
    {"type": "audit", "forged": "reject", "trusted": {"principals": ["User:mirror"]}},
    {"type": "audit", "fields": []},
    {"type": "insert_header", "header": "app.id", "value": "checkout"},
    {"type": "insert_header", "header": "app.id", "typed": None, "mode": "if_absent"},
    {"type": "insert_header", "header": "req", "template": "{topic}-{uuid}", "mode": "add"},
    {"type": "drop_headers", "headers": ["k", "prefix:content-"]},
    {"type": "drop_headers", "headers": ["prefix:trace"]},  # watches what trace_context adds
]
HEADERS = st.lists(
    st.tuples(
        st.sampled_from(["traceparent", "tracestate", "herald.msg_id", "x.origin", "app.id",
                         "content-type", "k"]),
        st.sampled_from([TP, b"garbage", b"a=1", None, b"v"]),
    ),
    max_size=3,
)
slow = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@slow
@given(
    st.lists(st.sampled_from(PRODUCE_MEMBERS), min_size=1, max_size=3),
    st.lists(HEADERS, max_size=8),
    st.sampled_from(CONNS),
    st.integers(0, 2**32),
)
def test_append_path_gives_what_the_full_path_gives(members, record_headers, conn, seed):
    # Two members drawing message ids share a generator: record by record they take turns,
    # batch by batch the first takes all its ids first. Equally random, not the same bytes.
    assume(sum(m["type"] == "audit" and "msg_id" in m.get("fields", ["msg_id"])
               for m in members) < 2)
    chain = build_chains({"produce": members}, env()).produce
    full = full_path(chain)
    assert plan(full).fast is None
    assert run_real(chain, record_headers, conn, seed) == run_real(full, record_headers, conn,
                                                                     seed)
    assert run_fake(chain, record_headers, conn, seed) == run_fake(full, record_headers, conn,
                                                                     seed)


@pytest.mark.parametrize("members", [
    [{"type": "trace_context"}, {"type": "audit"}],
    [{"type": "trace_context", "mode": "batch"}, {"type": "insert_header", "header": "a",
                                                   "value": "1"}],
])
@pytest.mark.parametrize("codec", [NONE, LZ4])
def test_whole_batch_stamping_without_the_native_module(monkeypatch, members, codec):
    """Where protocol._stamp was not built, the Python reference gives the same batches."""
    from protocol import stamping

    record_headers = [[], [("k", b"v")], [], [("content-type", None)]]
    native = run_real(build_chains({"produce": members}, env()).produce, record_headers,
                      CONNS[0], 11, codec)
    monkeypatch.setattr(stamping, "_native", None)
    chain = build_chains({"produce": members}, env()).produce
    reference = run_real(chain, record_headers, CONNS[0], 11, codec)
    assert reference == native
    assert reference == run_real(full_path(chain), record_headers, CONNS[0], 11, codec)
    assert [len(h) for h in reference[2]] == [len(h) + len(reference[2][0])
                                              for h in record_headers]


def test_trace_context_and_audit_take_the_append_path():
    chain = build_chains({"produce": [{"type": "trace_context"}, {"type": "audit"}]},
                         env()).produce
    assert plan(chain).fast is not None
    outcome, out, headers, stats = run_real(chain, [[], [("content-type", b"json")]], CONNS[0], 1)
    assert [k for k, _ in headers[1]] == [
        "content-type", "traceparent", "herald.client_id", "herald.principal", "herald.source",
        "herald.proxy", "herald.cluster", "herald.time", "herald.msg_id", "herald.origin"]
    assert len(outcome.traces) == 2
    member_stats = {m["name"]: m for m in stats["members"]}
    assert member_stats["audit"]["headers_added"] == 16
    assert member_stats["trace_context"]["events"] == {"trace_new_context": 2}
    assert [r.headers for r in split_batches(out)[0].records] == headers


@pytest.mark.parametrize(
    "members",
    [
        # a member that does not declare what it reads (a glob)
        [{"type": "trace_context"}, {"type": "drop_headers", "headers": ["glob:k*"]}],
        # B3 and trace id copies take the full path
        [{"type": "trace_context", "b3_write": True}],
        # a later member watches what an earlier one appends
        [{"type": "trace_context"}, {"type": "insert_header", "header": "traceparent",
                                     "value": "x"}],
        [{"type": "insert_header", "header": "herald.x", "value": "x"}, {"type": "audit"}],
    ],
)
def test_no_append_path_when_the_promise_does_not_hold(members):
    assert plan(build_chains({"produce": members}, env()).produce).fast is None


@slow
@given(st.lists(HEADERS, max_size=8), st.sampled_from([NONE, LZ4]))
def test_dropping_headers_on_fetch_reads_only_the_batches_that_carry_them(record_headers, codec):
    """drop_headers with names and prefixes watches them: a batch without them passes as the
    bytes it came in; with them, the result is the full path's."""
    members = [{"type": "drop_headers", "headers": ["k", "prefix:content-"]}]
    chain = build_chains({"fetch": members}, env()).fetch
    assert plan(chain).fast is not None
    full = full_path(chain)
    raw = build_batch([Record(None, b"v", h) for h in record_headers], compression=codec,
                      base_timestamp=1, producer_id=1, producer_epoch=0, base_sequence=0)
    results = []
    for c in (chain, full):
        batches = split_batches(raw)
        c.process("t", 0, batches, CONNS[0])
        results.append((join_batches(batches), [r.headers for r in batches[0].records],
                        c.stats.snapshot()))
    assert results[0] == results[1]
    dropped = any(k == "k" or k.startswith("content-") for h in record_headers for k, _ in h)
    assert (results[0][0] == raw) is not dropped
    assert not any(k == "k" or k.startswith("content-") for h in results[0][1] for k, _ in h)


def test_appending_members_that_add_and_watch_different_keys_combine():
    members = [{"type": "audit"}, {"type": "trace_context"},
               {"type": "insert_header", "header": "app.id", "value": "a", "mode": "add"},
               {"type": "insert_header", "header": "app.id", "value": "b", "mode": "add"}]
    assert plan(build_chains({"produce": members}, env()).produce).fast is not None


@pytest.mark.parametrize("on_error", ["reject", "pass"])
def test_failing_make_follows_the_member_policy(monkeypatch, on_error):
    import interceptors.builtin.audit as audit

    calls = []

    def flaky(prefix):
        calls.append(prefix)
        if len(calls) == 3:
            raise RuntimeError("no more ids")
        return b"id-%d" % len(calls)

    def no_ids(prefix, n):
        raise RuntimeError("no more ids")

    monkeypatch.setattr(audit, "uuid7", flaky)
    monkeypatch.setattr(audit, "uuid7_many", no_ids)  # the whole-batch way fails at once
    results = []
    for make in (lambda c: c, full_path):
        calls.clear()
        chain = make(build_chains({"produce": [{"type": "trace_context"}, {
            "type": "audit", "on_error": on_error}]}, env()).produce)
        results.append(run_real(chain, [[], [], [], []], CONNS[0], 5))
    # The same outcome, bytes and headers; only the counts of the members before the failing
    # one differ (the whole-batch way stamped every record before the failure, the record
    # path the first two).
    assert results[0][:3] == results[1][:3]
    outcome, out, headers, stats = results[0]
    if on_error == "reject":
        assert outcome.error_code == UNKNOWN_SERVER_ERROR and out is None
    else:
        assert outcome.ok and outcome.traces == () and headers == [[]] * 4
    audit_stats = next(m for m in stats["members"] if m["name"] == "audit")
    assert audit_stats["errors"] == {"RuntimeError": 1}


def test_failing_make_drops_the_record_on_fetch(monkeypatch):
    import interceptors.builtin.insert_header as insert_header

    def ids_failing_at_the_third():
        ids = iter(["a", "b", None, "d"])

        def next_id():
            value = next(ids)
            if value is None:
                raise RuntimeError("no id")
            return value

        return next_id

    results = []
    for make in (lambda c: c, full_path):
        monkeypatch.setattr(insert_header, "uuid4", ids_failing_at_the_third())
        chain = make(build_chains({"fetch": [
            {"type": "insert_header", "header": "x", "value": "1", "mode": "add"},
            {"type": "insert_header", "header": "id", "template": "{uuid}", "on_error": "drop"},
        ]}, env()).fetch)
        assert isinstance(chain, FetchChain)
        results.append(run_fake(chain, [[], [], [], []], CONNS[0], 1))
    assert results[0] == results[1]
    _, modified, records, stats = results[0]
    assert [h for h, _ in records] == [[("x", b"1"), ("id", v)] for v in (b"a", b"b", b"d")]
    assert stats["members"][1]["records_dropped"] == {"error": 1}
    assert stats["members"][0]["headers_added"] == 4  # the dropped record was stamped first


def test_subclass_that_looks_at_every_record_drops_the_declaration():
    from interceptors.builtin.insert_header import InsertHeader, InsertHeaderConfig

    class Loud(InsertHeader):
        stamps = None  # looks at every record: not a stamping member any more

        def __init__(self, config, env):
            super().__init__(config, env)
            self.stamps = None

        def on_record(self, ctx, headers):
            headers.add("loud", b"1")
            headers.set(self._key, self._value)

    chain = ProduceChain([ChainMember("loud", Loud(InsertHeaderConfig("a", "1"), env()))])
    assert plan(chain).fast is None
    _, _, headers, _ = run_real(chain, [[]], CONNS[0], 1)
    assert headers == [[("loud", b"1"), ("a", b"1")]]


def test_compressed_batches_and_many_records_stay_identical():
    chain = build_chains({"produce": [{"type": "trace_context"}, {"type": "audit"}]},
                         env()).produce
    record_headers = [[] if i % 7 else [("traceparent", TP)] for i in range(60)]
    a = run_real(chain, record_headers, CONNS[0], 3, codec=LZ4)
    b = run_real(full_path(chain), record_headers, CONNS[0], 3, codec=LZ4)
    assert a == b


def test_two_audit_members_stamp_different_message_ids_batch_by_batch():
    members = [{"type": "audit"}, {"type": "audit", "fields": ["msg_id"], "prefix": "x."}]
    chain = build_chains({"produce": members}, env()).produce
    _, out, headers, _ = run_real(chain, [[], [], []], CONNS[0], 4)
    ids_seen = [v for h in headers for k, v in h if k.endswith("msg_id")]
    assert len(ids_seen) == 6 and len(set(ids_seen)) == 6
    assert [r.headers for r in split_batches(out)[0].records] == headers


@pytest.mark.parametrize("stamping_path", [True, False])
def test_without_tracing_no_traces_are_kept_and_the_records_are_the_same(stamping_path):
    members = [{"type": "trace_context"}, {"type": "audit"}]
    record_headers = [[], []] if stamping_path else [[("traceparent", b"bad")], []]
    results = []
    for traces in (True, False):
        chain = build_chains({"produce": members}, env()).produce
        batches = split_batches(build_batch([Record(None, b"v", h) for h in record_headers],
                                            base_timestamp=1))
        ids.seed(9)
        outcome = chain.process("t", 0, batches, CONNS[0], traces=traces)
        results.append((outcome, join_batches(batches), chain.stats.snapshot()))
    (with_traces, out, stats), (without, out2, stats2) = results
    assert len(with_traces.traces) == 2 and without.traces == ()
    assert out == out2 and stats == stats2
