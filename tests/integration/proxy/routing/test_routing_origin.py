"""Herald's origin mark through real brokers, real clients and real Heralds.

The mark is what keeps a routed record from being routed again (loops between Heralds, or
through one Herald), and it is trusted only when Herald's seal verifies it on the record as it
arrived: a client that writes the header itself is routed like any other client, with or
without `audit` in the chain; records another Herald sealed with the shared `origin_key`, or
that a Herald sent through itself, are not routed again, with or without `audit` (which
strips the header before routing runs).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from proxy.devtools.embedded_kafka import KafkaCluster
from proxy.routing.origin import OriginSeal
from proxy.routing.rules import ORIGIN_HEADER
from tests.support.clients import consume_all, create_topic
from tests.support.herald_process import HeraldProcess, free_port_block, herald_config
from tests.support.routing_runs import (
    by_partition,
    end_offsets,
    expect,
    header,
    metric,
    mixed_records,
    produce,
)

SECRET = "the origin key every Herald of these tests shares"
SEAL = OriginSeal(SECRET.encode())
CHAINS = {"no-chain": {}, "audit": {"produce": [{"type": "audit"}]}}


def herald(upstream: str, clusters: dict[str, str], rules: list[dict], chain: str,
           key_file: Path | None = None, listen: dict | None = None) -> HeraldProcess:
    """A Herald in front of `upstream` routing to `clusters` (name: bootstrap)."""
    routing: dict[str, Any] = {"rules": rules, "delivery_timeout_s": 60}
    if key_file is not None:
        routing["origin_key"] = {"file": str(key_file)}
    config = herald_config(upstream, admin={"bind": f"127.0.0.1:{free_port_block(1)}"},
                           clusters={n: {"bootstrap": b} for n, b in clusters.items()},
                           routing=routing, interceptors=CHAINS[chain])
    if listen is not None:
        config["listen"] = listen
    return HeraldProcess(config)


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "origin.key"
    path.write_text(SECRET + "\n")
    return path


def rules(cluster: str, moved_to: str | None, copies_to: str, topics: list[str] | None = None
          ) -> list[dict]:
    """eu records move to `cluster` (topic `moved_to`, or their own); debug ones that are not
    eu are mirrored to `copies_to` there."""
    match: dict[str, Any] = {"topics": topics} if topics else {}
    move: dict[str, Any] = {"cluster": cluster, **({"topic": moved_to} if moved_to else {})}
    return [
        {"name": "eu", "match": {**match, "headers": {"header": "region", "equals": "eu"}},
         **move},
        {"name": "copy", "match": {**match, "headers": {"header": "debug", "present": True}},
         "mirror": {"cluster": cluster, "topic": copies_to, "partition": 0}},
    ]


def is_eu(r: dict) -> bool:
    return header(r, "region") == b"eu"


def is_copied(r: dict) -> bool:
    return not is_eu(r) and header(r, "debug") is not None


def forging(records: list[dict]) -> list[dict]:
    """The records, each with an origin header its client wrote: plain text, or shaped like a
    mark (a cluster id, a separator and 22 characters of tag)."""
    for i, r in enumerate(records):
        fake = b"forged" if i % 2 else b"Yj3bDjQxT9yq1h3lJ8rVxw;" + b"A" * 22
        r["headers"].append((ORIGIN_HEADER, fake))
    return records


def seen(messages: list[Any], sealed: bool) -> dict[int, list[tuple]]:
    """By partition: key, value and the headers a client wrote (audit's herald.* headers left
    out); with `sealed`, the last header must be Herald's verified mark, shown as None."""
    out: dict[int, list[tuple]] = {}
    for p, rows in by_partition(messages).items():
        for key, value, headers in rows:
            if sealed:
                assert headers[-1][0] == ORIGIN_HEADER, headers
                assert SEAL.verifies(headers[-1][1], key, value), headers[-1]
                headers = headers[:-1] + ((ORIGIN_HEADER, None),)
            kept = tuple(h for h in headers if not h[0].startswith("herald.")
                         or h[0] == ORIGIN_HEADER)
            out.setdefault(p, []).append((key, value, kept))
    return out


def as_written(records: list[dict], chain: str) -> list[dict]:
    """What the records' client headers are once the chain ran: audit strips every header
    under its prefix, the forged origin header included."""
    if chain == "no-chain":
        return records
    return [dict(r, headers=[h for h in r["headers"] if not h[0].startswith("herald.")])
            for r in records]


@pytest.mark.parametrize("chain", list(CHAINS))
def test_a_forged_origin_header_dodges_no_move_or_mirror_rule(
    kafka: KafkaCluster, kafka_b: KafkaCluster, topic_name: str, key_file: Path, chain: str
) -> None:
    copies = f"{topic_name}-copies"
    create_topic(kafka.bootstrap, topic_name, 2)
    create_topic(kafka_b.bootstrap, topic_name, 2)
    create_topic(kafka_b.bootstrap, copies, 1)
    records = forging(mixed_records(300, 2))
    with herald(kafka.bootstrap, {"b": kafka_b.bootstrap}, rules("b", None, copies), chain,
                key_file) as h:
        assert produce(h.bootstrap, topic_name, records) == []
        written = as_written(records, chain)
        stay = expect(written, lambda r: not is_eu(r))
        moved = expect(written, is_eu, ((ORIGIN_HEADER, None),))
        copied = expect(written, is_copied, ((ORIGIN_HEADER, None),))
        assert all(moved.values()) and copied[0] and copied[1]
        got_stay = consume_all(kafka.bootstrap, topic_name, sum(map(len, stay.values())))
        got_moved = consume_all(kafka_b.bootstrap, topic_name, sum(map(len, moved.values())))
        got_copies = consume_all(kafka_b.bootstrap, copies, sum(map(len, copied.values())))
        assert seen(got_stay, sealed=False) == stay
        assert seen(got_moved, sealed=True) == moved
        (all_copies,) = seen(got_copies, sealed=True).values()  # two sources, one partition
        assert sorted(all_copies) == sorted(copied[0] + copied[1])
        assert end_offsets(kafka.bootstrap, topic_name) == {p: len(v) for p, v in stay.items()}
        assert end_offsets(kafka_b.bootstrap, topic_name) == {
            p: len(v) for p, v in moved.items()}
        assert end_offsets(kafka_b.bootstrap, copies) == {0: len(all_copies)}
        assert metric(h, "herald_routing_records_total", rule="eu",
                      outcome="delivered") == sum(map(is_eu, records))
        assert metric(h, "herald_routing_records_total", rule="copy",
                      outcome="delivered") == sum(map(is_copied, records))


@pytest.mark.parametrize("case", ["shared-key", "shared-key-audit", "own-key"])
def test_records_another_herald_routed_are_not_routed_back(
    kafka: KafkaCluster, kafka_b: KafkaCluster, topic_name: str, key_file: Path, case: str
) -> None:
    """Herald A (in front of the first cluster) routes eu records and debug copies to the
    second cluster through Herald B, whose own rules would send the same records back. B
    leaves what A sealed where A sent it (with audit in B's chain too, which strips the mark
    before routing runs) and routes its own clients' records, forged headers or not. A B that
    does not share A's key trusts none of A's marks and routes those records back."""
    back, back_copies = f"{topic_name}-back", f"{topic_name}-back-copies"
    copies = f"{topic_name}-copies"
    direct = f"{topic_name}-direct"
    for name in (topic_name, back, back_copies):
        create_topic(kafka.bootstrap, name, 1)
    for name in (topic_name, copies, direct):
        create_topic(kafka_b.bootstrap, name, 1)
    chain_b = "audit" if case == "shared-key-audit" else "no-chain"
    herald_b = herald(kafka_b.bootstrap, {"a": kafka.bootstrap},
                      rules("a", back, back_copies), chain_b,
                      key_file if case != "own-key" else None)
    via_a = mixed_records(200, 1)
    from_b = forging(mixed_records(90, 1))
    with herald_b as b, herald(kafka.bootstrap, {"b": b.bootstrap},
                               rules("b", None, copies), "no-chain", key_file) as a:
        assert produce(a.bootstrap, topic_name, via_a) == []
        assert produce(b.bootstrap, direct, from_b) == []
        n_eu, n_copied = sum(map(is_eu, via_a)), sum(map(is_copied, via_a))
        # A did what its rules say: what stays is on the first cluster, eu and copies left.
        assert seen(consume_all(kafka.bootstrap, topic_name, len(via_a) - n_eu), False) == (
            expect(via_a, lambda r: not is_eu(r)))
        routed_back = case == "own-key"
        if routed_back:  # B routed A's records like any: everything it could, back
            assert end_offsets(kafka_b.bootstrap, topic_name) == {}
            assert end_offsets(kafka_b.bootstrap, copies) == {0: n_copied}
        else:
            moved = expect(as_written(via_a, chain_b), is_eu,
                           () if chain_b == "audit" else ((ORIGIN_HEADER, None),))
            assert seen(consume_all(kafka_b.bootstrap, topic_name, n_eu), chain_b != "audit"
                        ) == moved
            assert end_offsets(kafka_b.bootstrap, copies) == {0: n_copied}
        # B's own clients are routed by B's rules, forged origin headers and all.
        written = as_written(from_b, chain_b)
        stays = len(from_b) - sum(map(is_eu, from_b))
        assert seen(consume_all(kafka_b.bootstrap, direct, stays), False) == expect(
            written, lambda r: not is_eu(r))
        theirs = sum(map(is_eu, from_b)) + (n_eu if routed_back else 0)
        assert len(consume_all(kafka.bootstrap, back, theirs)) == theirs
        time.sleep(2)  # anything more would be a record routed twice
        assert end_offsets(kafka.bootstrap, back) == {0: theirs}
        copied_back = sum(map(is_copied, from_b)) + (n_copied if routed_back else 0)
        assert end_offsets(kafka.bootstrap, back_copies) == {0: copied_back}
        assert metric(b, "herald_routing_records_total", rule="eu",
                      outcome="delivered") == theirs


@pytest.mark.parametrize("chain", list(CHAINS))
def test_records_herald_sends_through_itself_are_routed_once(
    kafka: KafkaCluster, topic_name: str, chain: str
) -> None:
    """A destination reached through Herald's own listener, and rules that match what lands
    there: without the mark each moved record would come back and move again, forever. With
    no `origin_key`, the mark is sealed with the process's own key, which it trusts."""
    moved_to, copies = f"{topic_name}-eu", f"{topic_name}-copies"
    for name in (topic_name, moved_to, copies):
        create_topic(kafka.bootstrap, name, 1)
    port = free_port_block()
    listen = {"bootstrap": f"127.0.0.1:{port}", "advertised_host": "127.0.0.1",
              "broker_port_base": port}
    records = mixed_records(200, 1)
    n_eu, n_copied = sum(map(is_eu, records)), sum(map(is_copied, records))
    with herald(kafka.bootstrap, {"self": listen["bootstrap"]},
                rules("self", moved_to, copies, [f"prefix:{topic_name}"]), chain,
                listen=listen) as h:
        assert produce(h.bootstrap, topic_name, records) == []
        assert len(consume_all(kafka.bootstrap, moved_to, n_eu)) == n_eu
        assert len(consume_all(kafka.bootstrap, copies, n_copied)) == n_copied
        time.sleep(2)  # a loop would keep writing
        assert end_offsets(kafka.bootstrap, topic_name) == {0: len(records) - n_eu}
        assert end_offsets(kafka.bootstrap, moved_to) == {0: n_eu}
        assert end_offsets(kafka.bootstrap, copies) == {0: n_copied}
        assert metric(h, "herald_routing_records_total", rule="eu",
                      outcome="delivered") == n_eu
        assert metric(h, "herald_routing_records_total", rule="copy",
                      outcome="delivered") == n_copied
