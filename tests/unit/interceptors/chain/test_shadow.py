"""Shadow members: evaluated and counted as if live, and nothing of what they do is applied.

Each test runs the same input through a chain with the member live and a chain with it in
shadow, from the same random state: the shadow chain's bytes, outcome and traces are those
of a chain without the member, and its counters are those of the live member.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interceptors import ConnectionInfo, ProxyInfo, build_chains, ids
from protocol.records import Record, build_batch, join_batches, split_batches

NOW = 1_700_000_000.5
TP = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
CONN = ConnectionInfo(client_id="app", address="10.0.0.1:4000")

PRODUCE = [
    {"type": "trace_context"},
    {"type": "audit"},
    {"type": "audit", "forged": "reject"},
    {"type": "insert_header", "header": "app", "value": "x"},
    {"type": "drop_headers", "headers": ["prefix:k"]},
    {"type": "rename_header", "from": "k", "to": "kk"},
    {"type": "require_headers", "headers": ["tenant"]},
    {"type": "header_limits", "max_count": 2},
]
# A live member next to the shadow one; deterministic, so that a shadow member drawing ids
# cannot change what it writes.
OTHER = {"type": "insert_header", "header": "o", "value": "1"}
FETCH = [
    {"type": "filter", "header": "k", "present": True},
    {"type": "drop_headers", "headers": ["tenant"]},
    {"type": "insert_header", "header": "seen", "template": "{uuid}", "mode": "add"},
]
HEADERS = st.lists(
    st.tuples(st.sampled_from(["traceparent", "tracestate", "herald.x", "k", "kx", "tenant"]),
              st.sampled_from([TP, b"a=1", b"v", None])),
    max_size=3,
)
BATCHES = st.lists(st.lists(HEADERS, min_size=1, max_size=5), min_size=1, max_size=3)
slow = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def env() -> ProxyInfo:
    return ProxyInfo(instance_id="herald-1", cluster_id="c1", clock=lambda: NOW)


def raw_partition(batches: list[list[list]]) -> bytes:
    return join_batches([
        build_batch([Record(b"k", b"v", h) for h in headers], base_timestamp=1, producer_id=1,
                    producer_epoch=0, base_sequence=10 * i)
        for i, headers in enumerate(batches)
    ])


def run(path: str, members: list[dict], raw: bytes, seed: int = 7):
    """(outcome, bytes out, member counters by name) of one run over `raw`."""
    chain = getattr(build_chains({path: members}, env()), path)
    batches = split_batches(raw)
    random.seed(seed)
    ids.seed(seed)
    outcome = chain.process("t", 0, batches, CONN)
    data = join_batches([b.to_bytes() if b.modified else b for b in batches])
    counters = {m["name"]: {k: v for k, v in m.items() if k not in ("shadow", "records_seen")}
                for m in chain.stats.snapshot()["members"]}
    return outcome, data, counters


def shadowed(member: dict) -> dict:
    return {**member, "shadow": True}


@slow
@given(st.sampled_from(PRODUCE), st.sampled_from([None, OTHER]), BATCHES)
def test_a_shadow_produce_member_changes_nothing_and_counts_what_it_would_do(member, other,
                                                                            batches):
    raw = raw_partition(batches)
    others = [other] if other else []
    outcome, data, counts = run("produce", [shadowed(member), *others], raw)
    alone = run("produce", others, raw) if others else None
    if alone is None:
        assert data == raw and outcome.ok and outcome.traces == ()
    else:  # exactly what the other member does without it
        assert (outcome, data) == alone[:2]
    live_outcome, live_data, live_counts = run("produce", [member], raw)
    name = member["type"]
    assert counts[name] == live_counts[name]
    if not live_outcome.ok:
        assert counts[name]["records_rejected"] == {
            next(iter(live_counts[name]["records_rejected"])): sum(map(len, batches))}


@slow
@given(st.sampled_from(FETCH), BATCHES)
def test_a_shadow_fetch_member_changes_nothing_and_counts_what_it_would_do(member, batches):
    raw = raw_partition(batches)
    _, data, counts = run("fetch", [shadowed(member)], raw)
    assert data == raw
    _, _, live_counts = run("fetch", [member], raw)
    assert counts[member["type"]] == live_counts[member["type"]]


def test_shadow_counts_are_labelled_as_what_would_have_happened():
    from proxy.observability.metrics import flatten, record_counts

    raw = raw_partition([[[("k", b"1")], [], [("k", b"2")]]])
    chains = build_chains({"fetch": [shadowed(FETCH[0]), FETCH[1]]}, env())
    batches = split_batches(raw)
    chains.fetch.process("t", 0, batches, CONN)
    counts = record_counts(chains.fetch.stats)
    assert counts[("filter", "shadow_dropped", "filtered")] == 2
    assert ("filter", "dropped", "filtered") not in counts
    assert chains.fetch.stats.snapshot()["members"][0]["shadow"] is True
    flat = flatten(chains)
    assert ("shadow_headers", "fetch", "filter", "added") in flat
    assert ("headers", "fetch", "filter") not in flat


@pytest.mark.parametrize("on_error", ["reject", "pass"])
def test_a_failing_shadow_member_only_counts(monkeypatch, on_error):
    import interceptors.builtin.audit as audit

    def broken(prefix):
        raise RuntimeError("no ids")

    monkeypatch.setattr(audit, "uuid7", broken)
    monkeypatch.setattr(audit, "uuid7_many", lambda prefix, n: broken(prefix))
    raw = raw_partition([[[], []], [[]]])
    member = {"type": "audit", "on_error": on_error}
    outcome, data, counts = run("produce", [shadowed(member)], raw)
    assert outcome.ok and data == raw
    live_outcome, _, live_counts = run("produce", [member], raw)
    assert live_outcome.ok == (on_error == "pass")
    assert counts["audit"]["errors"] == live_counts["audit"]["errors"]
    assert counts["audit"]["records_rejected"] == live_counts["audit"]["records_rejected"]


def test_shadow_is_a_boolean():
    from interceptors import ConfigError

    with pytest.raises(ConfigError, match=r"interceptors\.produce\[0\]\.shadow: expected true"):
        build_chains({"produce": [{"type": "audit", "shadow": "yes"}]}, env())
