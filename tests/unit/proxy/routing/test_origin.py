"""The origin mark without a broker: what the seal verifies, where its key comes from, and that
routing trusts a record's mark only as the record arrived and only when the seal verifies it
(the integration tests in tests/integration/proxy/routing/test_routing_origin.py do the same
through real brokers and real Heralds)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from configuration import ConfigError
from protocol.records import Record, RecordBatch, build_batch
from proxy.routing.arrival import PartitionArrival
from proxy.routing.origin import PROCESS_SEAL, OriginSeal
from proxy.routing.produce_filter import RoutingFilter
from proxy.routing.rules import ORIGIN_HEADER, RoutingTable
from proxy.routing.stats import RoutingStats
from proxy.upstream.topic_ids import TopicIds
from tests.support.routing_config import config

SECRET = "a shared origin key, long enough"
SEAL = OriginSeal(SECRET.encode())


def test_a_mark_verifies_for_its_record_only() -> None:
    mark = SEAL.mark(b"cluster-1", b"k", b"v")
    assert mark.startswith(b"cluster-1;")
    assert SEAL.verifies(mark, b"k", b"v")
    assert not SEAL.verifies(mark, b"k", b"w")  # another value
    assert not SEAL.verifies(mark, b"K", b"v")  # another key
    assert not SEAL.verifies(mark, None, b"v")  # null key is not an empty key...
    assert SEAL.verifies(SEAL.mark(b"c", None, b""), None, b"")
    assert not SEAL.verifies(SEAL.mark(b"c", None, b""), b"", b"")  # ...nor the reverse
    assert not SEAL.verifies(b"cluster-2" + mark[9:], b"k", b"v")  # another cluster
    assert not OriginSeal(b"another key, just as long").verifies(mark, b"k", b"v")
    assert not PROCESS_SEAL.verifies(mark, b"k", b"v")
    for forged in (b"forged", b"", b"cluster-1;", mark[:-1], mark + b"A", b";" + mark):
        assert not SEAL.verifies(forged, b"k", b"v"), forged


def test_the_key_comes_from_a_secret_and_is_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_file = tmp_path / "origin.key"
    key_file.write_text(SECRET + "\n")
    monkeypatch.setenv("ORIGIN_KEY", SECRET)
    from_file = config([], origin_key={"file": str(key_file)}).routing.seal
    from_env = config([], origin_key={"env": "ORIGIN_KEY"}).routing.seal
    assert from_file == from_env == SEAL  # two Heralds with one key trust each other's marks
    assert config([]).routing.seal is PROCESS_SEAL  # no key: this process's own
    assert SECRET not in repr(config([], origin_key={"env": "ORIGIN_KEY"}))

    monkeypatch.setenv("SHORT_KEY", "too short")
    for origin_key, expected in [
        ({"env": "SHORT_KEY"}, "routing.origin_key: the key must be at least 16 characters"),
        ({"env": "NO_SUCH_VARIABLE"}, "routing.origin_key.env: environment variable"),
        ("inline-secret", "routing.origin_key: expected {file: PATH} or {env: VARIABLE}"),
        ({"file": str(tmp_path / "missing")}, "routing.origin_key.file: cannot read"),
    ]:
        with pytest.raises(ConfigError) as info:
            config([], origin_key=origin_key)
        assert str(info.value).startswith(expected), info.value


def _filter(seal_config: dict | None = None) -> RoutingFilter:
    rules = [{"name": "eu", "match": {"headers": {"header": "region", "equals": "eu"}},
              "cluster": "eu"},
             {"name": "copy", "match": {"headers": {"header": "debug", "present": True}},
              "mirror": {"cluster": "eu", "topic": "copies"}},
             {"name": "no", "match": {"headers": {"header": "pii", "present": True}},
              "reject": True}]
    table = RoutingTable(config(rules, **(seal_config or {})).routing)
    return RoutingFilter(table, TopicIds(), {}, RoutingStats(CollectorRegistry()))


def _plan(f: RoutingFilter, seen: bytes, arrived: bytes | None = None) -> dict[str, list[int]]:
    """Which records each rule routes when routing sees `seen`, which arrived as `arrived`."""
    batch = RecordBatch(seen)
    arrival = PartitionArrival(f.table.seal, arrived)
    plan = f._plan(batch, f.table.candidates("t", None), arrival.batch(0, batch))
    return {r.rule.name: r.indexes for r in plan.routed}


def records(origins: list[bytes | None], extra: tuple = ()) -> list[Record]:
    """Records 0..n, the even ones eu (moved), the odd ones debug (mirrored), with the given
    origin header values."""
    out = []
    for i, origin in enumerate(origins):
        headers = [("debug", b"1")] if i % 2 else [("region", b"eu")]
        headers += [(ORIGIN_HEADER, origin)] if origin is not None else []
        out.append(Record(b"k%d" % i, b"v%d" % i, headers + list(extra)))
    return out


def test_forged_origin_headers_are_routed_like_any_record() -> None:
    f = _filter()
    seal = f.table.seal
    forged = [b"forged", SEAL.mark(b"c", b"k2", b"v2"), seal.mark(b"c", b"k0", b"v0"), None]
    # 0: any text; 1: a mark under another key; 2: a real mark, for another record (copied)
    assert _plan(f, build_batch(records(forged))) == {"eu": [0, 2], "copy": [1, 3]}
    table = f.table
    no_provenance = table.decide(table.candidates("t", None), records(forged)[0].headers)
    assert no_provenance.rule.name == "eu"  # nothing proves it was routed before


def test_a_record_herald_routed_stays_and_reject_rules_still_apply() -> None:
    f = _filter()
    seal = f.table.seal
    marks = [seal.mark(b"c", b"k%d" % i, b"v%d" % i) for i in range(4)]
    marks[2] = b"forged"
    assert _plan(f, build_batch(records(marks))) == {"eu": [2]}
    # The last origin header counts: a forged one after Herald's is not Herald's.
    both = records([marks[0]], extra=((ORIGIN_HEADER, b"forged"),))
    assert _plan(f, build_batch(both)) == {"eu": [0]}
    from proxy.routing.produce_filter import _Refuse

    with pytest.raises(_Refuse):
        _plan(f, build_batch(records([marks[0]], extra=(("pii", b""),))))


@pytest.mark.parametrize("compression", [0, 1, 4])
def test_the_mark_is_read_as_the_record_arrived(compression: int) -> None:
    """A chain member stripped the origin header (as audit does): a record that arrived with
    Herald's mark is still not routed again, one that arrived with a forged header is."""
    f = _filter()
    seal = f.table.seal
    origins = [seal.mark(b"c", b"k%d" % i, b"v%d" % i) for i in range(4)]
    origins[1] = b"forged"
    arrived = build_batch(records(origins), compression=compression)
    stripped = build_batch(records([None] * 4, extra=(("herald.time", b"1"),)),
                           compression=compression)
    assert _plan(f, stripped, arrived) == {"copy": [1]}
    assert _plan(f, stripped, None) == {"eu": [0, 2], "copy": [1, 3]}  # as routing sees it
    # Records the client sent without any origin header: the arrival is not even parsed.
    plain = build_batch(records([None] * 4), compression=compression)
    arrival = PartitionArrival(seal, plain)
    batch = RecordBatch(stripped)
    plan = f._plan(batch, f.table.candidates("t", None), arrival.batch(0, batch))
    assert [r.indexes for r in plan.routed] == [[0, 2], [1, 3]]
    assert not arrival._split()[0].parsed


def test_an_arrival_that_does_not_match_what_routing_sees_proves_nothing() -> None:
    f = _filter()
    seal = f.table.seal
    marks = [seal.mark(b"c", b"k%d" % i, b"v%d" % i) for i in range(4)]
    fewer = build_batch(records(marks[:3]))
    everything = {"eu": [0, 2], "copy": [1, 3]}
    assert _plan(f, build_batch(records([None] * 4)), fewer) == everything
    assert _plan(f, build_batch(records([None] * 4)), b"\x00garbage") == everything


async def test_a_large_partition_reads_its_arrival_in_the_worker_thread() -> None:
    """Over the offload size the arrived batches are decompressed with the others, off the
    loop; the decision is the same. (The filter has no destination: routing a record would
    fail the test, so every record here must stay.)"""
    from proxy.filters.interception import OFFLOAD_BYTES

    f = _filter()
    seal = f.table.seal
    n = 400
    value = b"x" * (OFFLOAD_BYTES // n + 1)
    arrived = build_batch([Record(b"k%d" % i, value, [("region", b"eu"), (
        ORIGIN_HEADER, seal.mark(b"c", b"k%d" % i, value))]) for i in range(n)], compression=1)
    seen = build_batch([Record(b"k%d" % i, value, [("region", b"eu")]) for i in range(n)])
    assert len(seen) >= OFFLOAD_BYTES
    candidates = f.table.candidates("t", None)
    assert await f._partition("t", 0, seen, candidates, -1, arrived) == (None, [], False)


def test_a_reload_reads_the_key_again(tmp_path: Path) -> None:
    """A rotated key file is picked up by SIGHUP; a reload that cannot read it changes nothing."""
    import yaml

    from proxy.config.proxy_yaml import load_config
    from proxy.server import Proxy

    key_file = tmp_path / "origin.key"
    key_file.write_text(SECRET)
    path = tmp_path / "proxy.yaml"
    data = {"upstream": {"bootstrap": "127.0.0.1:9092"},
            "listen": {"bootstrap": "127.0.0.1:19092"},
            "clusters": {"eu": {"bootstrap": "127.0.0.1:1"}},
            "routing": {"origin_key": {"file": str(key_file)},
                        "rules": [{"match": {}, "cluster": "eu"}]}}
    path.write_text(yaml.safe_dump(data))
    proxy = Proxy(load_config(path))
    assert proxy.routing.table.seal == SEAL
    rotated = "the next origin key, as long as the first"
    key_file.write_text(rotated)
    assert proxy.reload()
    assert proxy.routing.table.seal == OriginSeal(rotated.encode()) != SEAL
    key_file.unlink()
    assert not proxy.reload()
    assert proxy.routing.table.seal == OriginSeal(rotated.encode())
