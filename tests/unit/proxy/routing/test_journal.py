"""The routing journal: its bytes, its file, and the sequence map made again from it."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from proxy.routing.config import journal_path
from proxy.routing.journal import (
    ATTEMPT,
    DELIVERED,
    HEADER,
    STATE,
    Entry,
    JournalError,
    JournalFile,
    decode,
    encode,
    replay,
)
from proxy.routing.remembered import FAILED, ON, WAITING, RememberedSequences
from proxy.routing.sequences import SequenceMap
from proxy.routing.stats import RoutingStats

ENTRIES = [
    Entry(HEADER, text="cluster-Ä"),
    Entry(ATTEMPT, 123456789012, 3, "orders", 7, 2**31 - 2, 5, 2, 17),
    Entry(DELIVERED, 123456789012, 3, "orders", 7, 2**31 - 2, text="eu-orders"),
    Entry(STATE, -1, -1, "t" * 249, 0, 0, shift=2**31 - 1),
]


def test_every_kind_of_entry_reads_back_as_written() -> None:
    data = b"".join(map(encode, ENTRIES))
    assert decode(data) == (ENTRIES, len(data))


@pytest.mark.parametrize("cut", [1, 4, 8, 9, 20])
def test_reading_stops_at_an_entry_cut_short(cut: int) -> None:
    data = b"".join(map(encode, ENTRIES))
    entries, used = decode(data[:-cut])
    assert entries == ENTRIES[:-1]
    assert used == len(data) - len(encode(ENTRIES[-1]))
    found = replay(data[:-cut], "cluster-Ä")
    assert found.entries == ENTRIES[1:-1] and "cut short" in found.note


def test_reading_stops_at_a_checksum_that_does_not_match() -> None:
    good = b"".join(map(encode, ENTRIES[:2]))
    bad = bytearray(encode(ENTRIES[2]))
    bad[-1] ^= 1
    assert decode(good + bytes(bad) + encode(ENTRIES[3]))[0] == ENTRIES[:2]


def test_a_journal_of_another_cluster_or_no_journal_is_set_aside() -> None:
    data = b"".join(map(encode, ENTRIES))
    other = replay(data, "another")
    assert other.entries == [] and "not 'another'" in other.note
    assert replay(b"garbage that is not a journal", "c").entries == []
    assert "not a routing journal" in replay(encode(ENTRIES[1]), "c").note
    empty = replay(b"", "c")  # a journal not written yet: nothing to replay, nothing to say
    assert empty.entries == [] and empty.note == ""


def test_the_sequence_map_comes_back_from_its_snapshot_and_from_its_entries() -> None:
    live = SequenceMap()
    key = (7, "t", 0)
    live.record(key, 0, 0, 10, 6, "plan")
    moved = live.record(key, 0, 10, 5, 0, "plan")
    moved.delivered.add("eu")
    live.record(key, 0, 15, 5, 5, "plan")
    live.record((8, "t", 1), 2, 40, 3, 1, "plan")  # first seen mid-way: its own epoch
    snapshot = live.snapshot()
    again = SequenceMap()
    again.restore(snapshot)
    assert again.snapshot() == snapshot
    # from the entries as they were appended, attempt by attempt, the same map
    appended = SequenceMap()
    appended.restore([e for e in snapshot if e.kind != STATE])
    assert appended.snapshot() == snapshot
    retried = again.retry(key, 0, 10, 5)
    assert retried is not None and retried.plan is None  # its plan is made again
    assert (retried.upstream_base, retried.kept, retried.delivered) == (6, 0, {"eu"})
    assert again.knows(key, 0, 20) and again.shift(key, 0) == live.shift(key, 0) == 9
    assert again.record(key, 0, 20, 2, 2, "p").upstream_base == 11
    assert again.shift((8, "t", 1), 2) == 2


def test_restoring_leaves_what_the_map_learnt_since_it_started() -> None:
    journaled = SequenceMap()
    journaled.record((1, "t", 0), 0, 0, 4, 2, None)
    journaled.record((2, "t", 0), 0, 0, 4, 2, None)
    live = SequenceMap()
    live.record((1, "t", 0), 5, 0, 3, 3, None)  # a newer epoch, seen before the journal opened
    live.restore(journaled.snapshot(), keep_live=True)
    assert live.shift((1, "t", 0), 5) == 0 and not live.knows((1, "t", 0), 0, 4)
    assert live.shift((2, "t", 0), 0) == 2


def test_the_map_bound_holds_while_restoring() -> None:
    journaled = SequenceMap()
    for pid in range(10):
        journaled.record((pid, "t", 0), 0, 0, 2, 1, None)
    small = SequenceMap(max_partitions=4)
    small.restore(journaled.snapshot())
    assert len(small) == 4 and small.knows((9, "t", 0), 0, 2)


def test_the_file_is_locked_rewritten_under_its_lock_and_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "state" / "routing.journal"
    journal = JournalFile(path)
    assert journal.open() == b""
    with pytest.raises(JournalError, match="held by another Herald"):
        JournalFile(path).open()
    journal.rewrite(ENTRIES[:2])
    assert journal.size == len(encode(ENTRIES[0])) + len(encode(ENTRIES[1]))
    assert not journal.append(encode(ENTRIES[2]))
    with pytest.raises(JournalError, match="held by another Herald"):
        JournalFile(path).open()  # the rewritten file is locked too
    assert decode(path.read_bytes())[0] == ENTRIES[:3]
    assert not (tmp_path / "state" / "routing.journal.new").exists()
    journal.close()
    again = JournalFile(path)
    assert decode(again.open())[0] == ENTRIES[:3]
    again.close()


def test_a_journal_grown_past_its_threshold_asks_to_be_rewritten(tmp_path: Path) -> None:
    journal = JournalFile(tmp_path / "j")
    journal.open()
    journal.rewrite(ENTRIES[:1])
    entry = encode(ENTRIES[1])
    grown = [journal.append(entry) for _ in range(4 * 1024 * 1024 // len(entry) + 1)]
    assert grown[-1] and not any(grown[:-2])
    journal.close()


def test_a_write_that_fails_removes_the_journal(tmp_path: Path) -> None:
    path = tmp_path / "j"
    journal = JournalFile(path)
    journal.open()
    journal.rewrite(ENTRIES[:1])
    read_only = os.open(path, os.O_RDONLY)
    os.close(journal._fd)
    journal._fd = read_only  # writes now fail (EBADF), as a full disk's would
    with pytest.raises(JournalError, match="cannot write"):
        journal.append(encode(ENTRIES[1]))
    assert not path.exists()  # a journal that missed an entry is never replayed


def test_a_journal_that_cannot_be_opened_is_dropped_with_a_reason(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    remembered = RememberedSequences(SequenceMap(), blocker / "j")  # its folder is a file
    remembered.open("c")
    assert remembered.state == FAILED


def test_remembered_sequences_open_replay_and_journal_each_step(tmp_path: Path) -> None:
    path = tmp_path / "j"
    registry = CollectorRegistry()
    stats = RoutingStats(registry)
    first = RememberedSequences(SequenceMap(), path, stats)
    first.open(None)  # the cluster id is not known yet: wait
    assert first.state == WAITING
    first.open("c1")
    assert first.state == ON
    assert registry.get_sample_value("herald_routing_journal_state", {"state": ON}) == 1.0
    assert registry.get_sample_value("herald_routing_journal_state", {"state": WAITING}) == 0
    assert registry.get_sample_value("herald_routing_journal_bytes") > 0
    key = (5, "t", 2)
    attempt = first.sequences.record(key, 1, 0, 4, 1, "plan")
    first.attempt(key, 1, attempt)
    first.delivered(key, 1, attempt, "eu")
    first.close()  # the process dies: nothing more is written
    second = RememberedSequences(SequenceMap(), path)
    second.open("c1")
    restored = second.sequences.retry(key, 1, 0, 4)
    assert restored is not None and restored.delivered == {"eu"} and restored.kept == 1
    assert second.sequences.shift(key, 1) == 3
    second.close()
    third = RememberedSequences(SequenceMap(), path)
    third.open("c2")  # another cluster behind the same path: nothing replayed
    assert third.state == ON and len(third.sequences) == 0
    third.close()


def test_the_journal_path_by_default_lives_beside_the_config_or_in_the_state_dir() -> None:
    source = Path("/etc/herald/proxy.yaml")
    assert journal_path("auto", source, 9092, {}) == Path(
        "/etc/herald/.herald-state/routing-9092.journal")
    assert journal_path("auto", source, 9092, {"HERALD_STATE_DIR": "/var/lib/herald"}) == Path(
        "/var/lib/herald/routing-9092.journal")
    assert journal_path("auto", None, 9092, {}) is None
    assert journal_path("off", source, 9092, {"HERALD_STATE_DIR": "/x"}) is None
    assert journal_path("state/r.journal", source, 1, {}) == Path("/etc/herald/state/r.journal")
    assert journal_path("/abs/r.journal", source, 1, {}) == Path("/abs/r.journal")


@given(st.binary(max_size=400))
@settings(max_examples=400, deadline=None)
def test_any_bytes_decode_to_entries_or_stop_cleanly(data: bytes) -> None:
    entries, used = decode(data)
    assert 0 <= used <= len(data)
    assert b"".join(map(encode, entries)) == data[:used]
    replay(data, "c")  # never raises


OPS = st.lists(st.tuples(
    st.sampled_from(["record", "delivered", "crash"]),
    st.integers(0, 2),  # producer id
    st.integers(0, 1),  # partition
    st.integers(0, 1),  # epoch
    st.integers(1, 6),  # records in the batch
    st.integers(0, 6),  # of which kept
), max_size=60)


@given(OPS)
@settings(max_examples=150, deadline=None)
def test_a_journal_replayed_after_any_crash_is_the_live_map(
    ops: list[tuple[str, int, int, int, int, int]],
) -> None:
    """Whatever was booked, and whenever the journal was rewritten, a Herald started from it
    holds what the one that died held."""
    folder = Path(tempfile.mkdtemp())
    try:
        path = folder / "j"
        live = RememberedSequences(SequenceMap(max_partitions=5), path)
        live.open("c")
        next_base: dict[tuple[int, int, int], int] = {}
        last: dict[tuple[int, str, int], tuple[int, Any]] = {}
        for op, pid, partition, epoch, count, kept in ops:
            key = (pid, "t", partition)
            if op == "record":
                base = next_base.get((pid, partition, epoch), 0)
                next_base[(pid, partition, epoch)] = base + count
                attempt = live.sequences.record(key, epoch, base, count, min(kept, count), "p")
                live.attempt(key, epoch, attempt)
                last[key] = (epoch, attempt)
            elif op == "delivered" and key in last:
                epoch, attempt = last[key]
                live.delivered(key, epoch, attempt, f"rule-{kept}")
            elif op == "crash":
                live.close()
                again = RememberedSequences(SequenceMap(max_partitions=5), path)
                again.open("c")
                assert again.sequences.snapshot() == live.sequences.snapshot()
                live = again
                last = {}
        live.close()
        final = RememberedSequences(SequenceMap(max_partitions=5), path)
        final.open("c")
        assert final.sequences.snapshot() == live.sequences.snapshot()
        final.close()
    finally:
        shutil.rmtree(folder)


async def test_rewrites_while_running_keep_the_map(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Rewrites are prepared in a worker thread while bookings go on; each one's file, and the
    last, replays to the map as it is."""
    monkeypatch.setattr("proxy.routing.journal.MIN_COMPACT_BYTES", 2000)
    live = RememberedSequences(SequenceMap(), tmp_path / "j")
    live.open("c")
    rewrites = 0
    for i in range(600):
        key = (i % 7, "t", i % 3)
        attempt = live.sequences.record(key, 0, i * 4, 4, i % 5, "p")
        live.attempt(key, 0, attempt)
        if i % 3 == 0:
            live.delivered(key, 0, attempt, "eu")
        if live._tail is not None:  # a rewrite is being prepared: let it finish, sometimes
            rewrites += 1
            if i % 2:
                while live._tail is not None:
                    await trio.sleep(0.001)
    while live._tail is not None:
        await trio.sleep(0.001)
    assert rewrites > 5
    assert (tmp_path / "j").stat().st_size < 600 * 60  # rewritten as it grew
    assert not (tmp_path / "j.new").exists()
    live.close()
    again = RememberedSequences(SequenceMap(), tmp_path / "j")
    again.open("c")
    assert again.sequences.snapshot() == live.sequences.snapshot()
    again.close()


async def test_a_rewrite_prepared_after_the_journal_was_dropped_is_discarded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("proxy.routing.journal.MIN_COMPACT_BYTES", 100)
    live = RememberedSequences(SequenceMap(), tmp_path / "j")
    live.open("c")
    key = (1, "t", 0)
    for i in range(5):
        live.attempt(key, 0, live.sequences.record(key, 0, i * 2, 2, 1, "p"))
    assert live._tail is not None
    live.close()  # the process stops while the rewrite is prepared
    while live._tail is not None:
        await trio.sleep(0.001)
    assert not (tmp_path / "j.new").exists()
    again = RememberedSequences(SequenceMap(), tmp_path / "j")
    again.open("c")  # the file as the appends left it
    assert again.sequences.snapshot() == live.sequences.snapshot()
    again.close()


@pytest.mark.parametrize("value", [5, "", "  ", ["a"]])
def test_a_bad_journal_setting_is_refused_with_its_path(value: Any) -> None:
    from configuration import ConfigError
    from proxy.config.proxy_yaml import parse_config

    with pytest.raises(ConfigError, match=r"routing\.journal: expected auto, off or a file"):
        parse_config({"upstream": {"bootstrap": "k:9092"},
                      "listen": {"bootstrap": "127.0.0.1:19092"},
                      "routing": {"journal": value}})


async def test_a_journal_dropped_for_any_failure_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever stops the journal, the file goes with it: it would miss what is booked from
    then on, and a Herald started from it would trust it."""
    monkeypatch.setattr("proxy.routing.journal.MIN_COMPACT_BYTES", 100)
    path = tmp_path / "j"
    live = RememberedSequences(SequenceMap(), path)
    live.open("c")

    def broken(*_: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(JournalFile, "prepare", broken)
    key = (1, "t", 0)
    for i in range(5):
        live.attempt(key, 0, live.sequences.record(key, 0, i * 2, 2, 1, "p"))
    while live._tail is not None:
        await trio.sleep(0.001)
    assert live.state == FAILED and not path.exists()
    live.attempt(key, 0, live.sequences.record(key, 0, 10, 2, 1, "p"))  # goes on without it
    assert not path.exists() and live.sequences.shift(key, 0) == 6
