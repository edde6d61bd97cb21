"""The chain engine: applicability, change tracking, verdicts, failure policies, stats."""

from __future__ import annotations

import pytest

from interceptors import (
    DROP,
    INVALID_RECORD,
    KEEP,
    UNKNOWN_SERVER_ERROR,
    ChainMember,
    ConnectionInfo,
    FetchChain,
    Interceptor,
    ProduceChain,
    ProxyInfo,
    RejectRecord,
)
from interceptors.patterns import NameMatcher
from interceptors.testing import FakeBatch, FakeRecord, make_batch

ENV = ProxyInfo(instance_id="test")
CONN = ConnectionInfo(client_id="app", address="10.0.0.1:4000")


class Stamp(Interceptor):
    """Sets header x=1."""

    def on_record(self, ctx, headers):
        headers.set("x", b"1")


class Reader(Interceptor):
    needs = "read"

    def __init__(self, config, env):
        super().__init__(config, env)
        self.seen = []

    def on_record(self, ctx, headers):
        self.seen.append((ctx.topic, ctx.partition, ctx.index, list(headers), ctx.record))


class Boom(Interceptor):
    """Fails on records whose value is b'boom' (after stamping them)."""

    needs = "key_value"

    def on_record(self, ctx, headers):
        headers.add("touched", b"1")
        if ctx.value == b"boom":
            raise RuntimeError("kaboom")


class DropOdd(Interceptor):
    needs = "read"

    def on_record(self, ctx, headers):
        return DROP if ctx.index % 2 else KEEP


class Refuse(Interceptor):
    needs = "read"

    def on_record(self, ctx, headers):
        if "bad" in headers:
            return RejectRecord(INVALID_RECORD, "bad header", "bad")
        return None


def member(cls, name=None, **kwargs):
    return ChainMember(name or cls.__name__, cls(None, ENV), **kwargs)


def batch(*headers_per_record, **kwargs):
    return make_batch([(b"k", b"v", h) for h in headers_per_record], **kwargs)


def test_untouched_batches_are_not_modified():
    chain = ProduceChain([member(Reader)])
    b = batch([("a", b"1")], [])
    assert chain.process("t", 0, [b], CONN).ok
    assert not b.modified
    assert not b.records_read  # a read-only chain scans headers without record objects


def test_headers_members_only_assign_real_changes():
    class Idempotent(Interceptor):
        def on_record(self, ctx, headers):
            headers.set("x", b"1")
            headers.remove("absent")

    chain = ProduceChain([member(Idempotent)])
    b = batch([("x", b"1")], [("y", b"2")])
    chain.process("t", 0, [b], CONN)
    first, second = b.records
    assert first.assignments == []  # already had x=1
    assert second.assignments == ["headers"]
    assert second.headers == [("y", b"2"), ("x", b"1")]
    assert chain.stats.members["Idempotent"].records_changed == 1


def test_members_apply_by_topic_and_client_id():
    reader = member(Reader, topics=NameMatcher(["orders", "prefix:pay."]),
                    client_ids=NameMatcher(["regex:svc-[0-9]+"]))
    chain = ProduceChain([reader])
    svc = ConnectionInfo(client_id="svc-12")
    assert chain.applies("orders", svc) and chain.applies("pay.eu", svc)
    assert not chain.applies("other", svc)
    assert not chain.applies("orders", ConnectionInfo(client_id="svc-x"))
    assert not chain.applies("orders", ConnectionInfo(client_id=None))
    b = batch([])
    chain.process("other", 0, [b], svc)
    assert reader.interceptor.seen == []
    chain.process("orders", 3, [b], svc)
    assert [s[:3] for s in reader.interceptor.seen] == [("orders", 3, 0)]


def test_needs_reports_the_most_any_member_needs():
    chain = ProduceChain([member(Reader), member(Boom, topics=NameMatcher(["kv"]))])
    assert chain.needs("t", CONN) == "read"
    assert chain.needs("kv", CONN) == "key_value"
    assert ProduceChain().needs("t", CONN) is None


def test_record_access_follows_the_declared_needs():
    class Peek(Interceptor):
        def on_record(self, ctx, headers):
            return ctx.value

    chain = ProduceChain([ChainMember("peek", Peek(None, ENV), on_error="reject")])
    outcome = chain.process("t", 0, [batch([])], CONN)
    assert outcome.error_code == UNKNOWN_SERVER_ERROR  # RuntimeError: needs key_value
    assert chain.stats.members["peek"].errors == {"RuntimeError": 1}


def test_key_value_members_see_timestamp_and_stage_new_values():
    class Upper(Interceptor):
        needs = "key_value"

        def on_record(self, ctx, headers):
            assert ctx.timestamp == 1000 + ctx.index
            ctx.set_value(ctx.value.upper())
            assert ctx.value == b"HELLO"

    records = [FakeRecord(b"k", b"hello", [], timestamp_delta=i) for i in range(2)]
    b = FakeBatch(records, base_timestamp=1000)
    ProduceChain([member(Upper)]).process("t", 0, [b], CONN)
    assert [r.value for r in b.records] == [b"HELLO", b"HELLO"]
    assert records[0].assignments == ["value"]


def test_control_batches_and_raw_chunks_are_never_touched():
    chain = FetchChain([member(Stamp), member(DropOdd)])
    control = batch([], [], is_control=True)
    legacy = b"\x00" * 30
    data = batch([], [])
    chain.process("t", 0, [control, legacy, data], CONN)
    assert not control.modified and not control.records_read
    assert data.modified and len(data.records) == 1


def test_transactional_data_batches_are_processed():
    b = batch([], is_transactional=True, producer_id=7, producer_epoch=1, base_sequence=5)
    ProduceChain([member(Stamp)]).process("t", 0, [b], CONN)
    assert b.records[0].headers == [("x", b"1")]
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.record_count) == (7, 1, 5, 1)


def test_fetch_drop_removes_records():
    chain = FetchChain([member(DropOdd), member(Stamp)])
    b = batch([], [], [], [])
    chain.process("t", 0, [b], CONN)
    assert [r.offset_delta for r in b.records] == [0, 2]
    assert all(r.headers == [("x", b"1")] for r in b.records)
    assert chain.stats.members["DropOdd"].records_dropped == {"filtered": 2}


def test_drop_is_refused_on_the_produce_path():
    chain = ProduceChain([ChainMember("d", DropOdd(None, ENV), on_error="reject")])
    outcome = chain.process("t", 0, [batch([], [])], CONN)
    assert outcome.error_code == UNKNOWN_SERVER_ERROR
    assert chain.stats.members["d"].errors == {"TypeError": 1}


def test_reject_refuses_the_partition_with_the_record_index():
    chain = ProduceChain([member(Stamp), member(Refuse)])
    first = batch([], [])
    second = batch([], [("bad", b"")], [])
    outcome = chain.process("t", 0, [first, second], CONN)
    assert not outcome.ok
    assert outcome.error_code == INVALID_RECORD
    assert outcome.error_message == "bad header"
    assert outcome.record_errors == ((1, "bad header"),)
    assert chain.stats.partitions_rejected == 1
    assert chain.stats.members["Refuse"].records_rejected == {"bad": 5}


def test_raising_reject_works_like_returning_it():
    class Raise(Interceptor):
        needs = "read"

        def on_record(self, ctx, headers):
            raise RejectRecord(INVALID_RECORD, "nope", "nope")

    outcome = ProduceChain([member(Raise)]).process("t", 0, [batch([])], CONN)
    assert (outcome.error_code, outcome.error_message) == (INVALID_RECORD, "nope")


def test_on_error_reject():
    chain = ProduceChain([ChainMember("boom", Boom(None, ENV), on_error="reject")])
    records = [FakeRecord(b"k", b"ok"), FakeRecord(b"k", b"boom")]
    outcome = chain.process("t", 0, [FakeBatch(records)], CONN)
    assert outcome.error_code == UNKNOWN_SERVER_ERROR
    assert "boom" in outcome.error_message and "RuntimeError" in outcome.error_message
    assert "kaboom" not in outcome.error_message  # internals stay in the stats
    st = chain.stats.members["boom"]
    assert st.errors == {"RuntimeError": 1} and st.last_error == "RuntimeError: kaboom"


@pytest.mark.parametrize("chain_cls", [ProduceChain, FetchChain])
def test_on_error_pass_leaves_the_whole_batch_as_it_came(chain_cls):
    chain = chain_cls([member(Stamp), ChainMember("boom", Boom(None, ENV), on_error="pass")])
    bad = FakeBatch([FakeRecord(b"k", b"ok"), FakeRecord(b"k", b"boom"), FakeRecord(b"k", b"ok")])
    good = FakeBatch([FakeRecord(b"k", b"ok")])
    outcome = chain.process("t", 0, [bad, good], CONN)
    assert outcome is None or outcome.ok
    assert not bad.modified
    assert good.records[0].headers == [("x", b"1"), ("touched", b"1")]
    assert chain.stats.members["boom"].errors == {"RuntimeError": 1}


def test_on_error_drop_removes_the_failing_record_on_fetch():
    chain = FetchChain([ChainMember("boom", Boom(None, ENV), on_error="drop")])
    b = FakeBatch([FakeRecord(b"k", b"ok", offset_delta=0),
                   FakeRecord(b"k", b"boom", offset_delta=1)])
    chain.process("t", 0, [b], CONN)
    assert [r.offset_delta for r in b.records] == [0]
    assert b.records[0].headers == [("touched", b"1")]
    assert chain.stats.members["boom"].records_dropped == {"error": 1}


def test_failing_batch_hook_follows_the_policy():
    class BadHook(Stamp):
        def on_batch(self, ctx):
            raise ValueError("no")

    produce = ProduceChain([ChainMember("h", BadHook(None, ENV), on_error="reject")])
    assert produce.process("t", 0, [batch([])], CONN).error_code == UNKNOWN_SERVER_ERROR
    fetch = FetchChain([ChainMember("h", BadHook(None, ENV), on_error="drop")])
    b = batch([], [])
    fetch.process("t", 0, [b], CONN)
    assert b.records == [] and b.record_count == 0


def test_read_members_cannot_write():
    class Sneaky(Interceptor):
        needs = "read"

        def on_record(self, ctx, headers):
            headers.add("sneaky", b"1")

    chain = ProduceChain([ChainMember("s", Sneaky(None, ENV), on_error="pass")])
    b = batch([])
    assert chain.process("t", 0, [b], CONN).ok
    assert not b.modified
    assert chain.stats.members["s"].errors == {"TypeError": 1}


def test_enforcing_members_refuse_legacy_format():
    class Policy(Reader):
        enforcing = True

    chain = ProduceChain([member(Policy)])
    outcome = chain.process("t", 0, [b"\x00" * 30], CONN)
    assert outcome.error_code == INVALID_RECORD and "v0/v1" in outcome.error_message
    assert ProduceChain([member(Reader)]).process("t", 0, [b"\x00" * 30], CONN).ok


def test_stats_count_batches_records_and_changes():
    chain = ProduceChain([member(Stamp), member(Reader)])
    chain.process("t", 0, [batch([], [("x", b"1")]), batch([])], CONN)
    snap = chain.stats.snapshot()
    assert (snap["batches_seen"], snap["batches_changed"], snap["records_seen"]) == (2, 2, 3)
    stamp = chain.stats.members["Stamp"]
    assert (stamp.records_seen, stamp.records_changed, stamp.headers_added) == (3, 2, 2)
    assert chain.stats.members["Reader"].records_changed == 0


def test_chain_checks_members():
    with pytest.raises(ValueError, match="not allowed on the produce path"):
        ProduceChain([member(DropOdd, on_error="drop")])
    with pytest.raises(ValueError, match="duplicate"):
        ProduceChain([member(Stamp, "a"), member(Reader, "a")])

    class FetchOnly(Reader):
        paths = frozenset({"fetch"})

    with pytest.raises(ValueError, match="cannot run"):
        ProduceChain([member(FetchOnly)])


def test_traces_noted_by_members_reach_the_outcome_unless_the_batch_is_abandoned():
    class Tracer(Interceptor):
        def on_record(self, ctx, headers):
            ctx.note_trace(1, 2, None, True, "new")
            if "fail" in headers:
                raise ValueError

    chain = ProduceChain([ChainMember("t", Tracer(None, ENV), on_error="pass")])
    outcome = chain.process("topic", 4, [batch([]), batch([], [("fail", None)])], CONN)
    assert [(t.trace_id, t.topic, t.partition) for t in outcome.traces] == [(1, "topic", 4)]


def test_real_record_batches_stay_byte_identical():
    from protocol import records
    raw = records.build_batch(
        [records.Record(b"k", b"v" * 100, [("a", b"1"), ("dup", b"x"), ("dup", None)])
         for _ in range(5)],
        producer_id=3, producer_epoch=0, base_sequence=10,
    )
    batches = records.split_batches(raw)
    chain = ProduceChain([member(Reader), ChainMember("idem", Stamp(None, ENV),
                                                      topics=NameMatcher(["other"]))])
    assert chain.process("t", 0, batches, CONN).ok
    assert records.join_batches(batches) == raw

    stamped = records.split_batches(raw)
    ProduceChain([member(Stamp)]).process("t", 0, stamped, CONN)
    out = records.split_batches(records.join_batches(stamped))[0]
    assert out.record_count == 5 and out.base_sequence == 10 and out.producer_id == 3
    assert out.records[0].headers == [("a", b"1"), ("dup", b"x"), ("dup", None), ("x", b"1")]
