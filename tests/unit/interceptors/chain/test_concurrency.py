"""Runs of one chain overlap in several threads: each run sees only its own batch state and
counts into its own counters, and the chain's totals are exact."""

from __future__ import annotations

import threading

from interceptors import ChainMember, ConnectionInfo, Interceptor, ProxyInfo, build_chains
from protocol.records import Record, RecordBatch, build_batch, split_batches

THREADS = 4
RUNS = 150


def test_overlapping_runs_keep_their_own_state_and_exact_counters():
    members = [{"type": "trace_context", "mode": "batch"}, {"type": "audit"},
               {"type": "insert_header", "header": "topic", "template": "{topic}-{client_id}"}]
    chain = build_chains({"produce": members}, ProxyInfo(instance_id="h", cluster_id="c")).produce
    assert not chain.serial("t", ConnectionInfo())
    # Watched headers in every other record, so both the record path and the whole-batch
    # path run, and switch between their per-batch state (ctx.memo) often.
    raw = build_batch([Record(b"k", b"v", [("tracestate", b"a=1")] if i % 2 else [])
                       for i in range(20)], base_timestamp=1)
    plain = build_batch([Record(b"k", b"v", []) for _ in range(20)], base_timestamp=1)
    wrong: list[str] = []
    start = threading.Barrier(THREADS)

    def work(n: int) -> None:
        conn = ConnectionInfo(client_id=f"app-{n}", address=f"10.0.0.{n}:1")
        start.wait()
        for i in range(RUNS):
            batches = split_batches(raw if i % 2 else plain)
            topic = f"topic-{n}"
            chain.process(topic, 0, batches, conn)
            records = RecordBatch(batches[0].to_bytes()).records
            for r in records:
                h = dict(r.headers)
                if (h["herald.client_id"] != conn.client_id.encode()
                        or h["topic"] != f"{topic}-{conn.client_id}".encode()):
                    wrong.append(repr(r.headers))
            # mode: batch, so one new context shared by the whole batch
            if len({dict(r.headers)["traceparent"] for r in records}) != 1:
                wrong.append("contexts differ within a batch")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
    total = THREADS * RUNS * 20
    stats = chain.stats
    assert stats.records_seen == total and stats.batches_seen == THREADS * RUNS
    for m in stats.members.values():
        assert m.records_seen == total
    assert stats.members["trace_context"].events == {"trace_new_context": THREADS * RUNS}
    assert stats.members["audit"].headers_added == total * 8


class Counting(Interceptor):
    """Keeps state on itself between on_batch and on_record: not concurrent."""

    def on_record(self, ctx, headers):
        return None


def test_a_member_that_is_not_concurrent_makes_its_plan_serial():
    chain = build_chains({"produce": [{"type": "audit"}]}).produce
    assert not chain.serial("t", ConnectionInfo())
    serial = type(chain)([*chain.members, ChainMember("c", Counting(None, ProxyInfo()),
                                                      topics=lambda topic: topic == "t")])
    assert serial.serial("t", ConnectionInfo())
    assert not serial.serial("other", ConnectionInfo())


def test_members_count_into_their_run_and_the_run_into_the_chain():
    chain = build_chains({"produce": [{"type": "audit"}]}).produce
    audit = chain.members[0].interceptor
    shared = chain.stats.members["audit"]
    seen = []

    def spy(run):
        seen.append(run.members["audit"].events)
        assert shared.events == {}  # not merged yet: the run counted into its own

    batch = split_batches(build_batch([Record(b"k", b"v", [("herald.x", b"1")])]))
    chain.process("t", 0, batch, ConnectionInfo(), counts=spy)
    assert seen == [{"forged_stripped": 1}] and shared.events == {"forged_stripped": 1}
    assert audit.stats is shared  # outside a run
