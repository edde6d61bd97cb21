"""The stream's hold decides for a whole bucket of traces at once (`pipeline.flow_hold`): it must
give every trace the verdict a state of its own would have had under Spark's event-time
timeouts. Checked on plain pandas frames, case by case and against a per-trace model on random
sequences of micro-batches."""

from __future__ import annotations

import pickle
import random

import pandas as pd
import pytest

from pipeline.flow_hold import (
    EVICTED,
    FINAL,
    LATE,
    UNTRACED,
    HoldRules,
    Step,
    empty_bucket,
    hold,
)

RULES = HoldRules(gap_ms=100, max_age_ms=1000, retention_ms=500, max_hops=4)
COLUMNS = ["trace_id", "offset", "event_ms"]


def hops(*rows: tuple[str | None, int, int]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=COLUMNS)


def verdicts(step: Step) -> dict[int, str]:
    """offset -> status of every emitted row."""
    return {int(o): status for frame, status in step.emitted for o in frame["offset"]}


def test_a_flow_is_held_until_the_watermark_passes_its_gap_then_tombstoned() -> None:
    a = "a" * 32
    step = hold(empty_bucket(COLUMNS), hops((a, 1, 1000), (a, 2, 1050)), 900, RULES)
    assert step.emitted == [] and step.bucket is not None
    assert step.bucket.timeout(RULES) == 1150  # last hop + gap
    # Spark times the bucket out once the watermark is past 1150: not at 1150 itself.
    same = hold(step.bucket, None, 1150, RULES)
    assert same.emitted == [] and len(same.bucket.held) == 2
    done = hold(same.bucket, None, 1151, RULES)
    assert verdicts(done) == {1: FINAL, 2: FINAL}
    assert len(done.bucket.held) == 0 and done.bucket.timeout(RULES) == 1050 + 100 + 500
    # A hop of the finished trace while its tombstone lasts is late, and changes nothing.
    late = hold(done.bucket, hops((a, 3, 1200)), 1300, RULES)
    assert verdicts(late) == {3: LATE} and len(late.bucket.held) == 0
    # After the tombstone expired the trace starts a new flow.
    gone = hold(late.bucket, None, 1651, RULES)
    assert gone.bucket is None
    again = hold(empty_bucket(COLUMNS), hops((a, 4, 1700)), 1651, RULES)
    assert again.emitted == [] and len(again.bucket.held) == 1


def test_a_flow_that_brings_hops_is_final_at_its_due_time() -> None:
    a = "a" * 32
    step = hold(empty_bucket(COLUMNS), hops((a, 1, 1000)), 1100, RULES)
    assert verdicts(step) == {1: FINAL}


def test_untraced_records_pass_and_big_or_old_flows_are_evicted() -> None:
    a, b = "a" * 32, "b" * 32
    step = hold(empty_bucket(COLUMNS), hops((None, 9, 5), *[(a, i, 1000 + i) for i in range(5)],
                                            (b, 7, 100)), 1100, RULES)
    assert verdicts(step) == {9: UNTRACED, **{i: EVICTED for i in range(5)}, 7: EVICTED}
    # Still busy when its age ran out: evicted, not final.
    c = "c" * 32
    step = hold(empty_bucket(COLUMNS), hops((c, 1, 2000)), 1500, RULES)
    for t in (2600, 2950):
        step = hold(step.bucket, hops((c, t, t)), t - 50, RULES)
    done = hold(step.bucket, None, 3001, RULES)
    assert set(verdicts(done).values()) == {EVICTED}


def test_the_bucket_survives_pickling() -> None:
    step = hold(empty_bucket(COLUMNS), hops(("a" * 32, 1, 1000)), 900, RULES)
    again = pickle.loads(pickle.dumps(step.bucket, protocol=5))
    assert verdicts(hold(again, None, 1101, RULES)) == {1: FINAL}


class PerTrace:
    """The model: one state per trace id with Spark's event-time timeout rules (the hold's
    definition before it decided per bucket), except that a tombstone past its time goes at
    the first call after it, even one that brought a hop (which is still late)."""

    def __init__(self, rules: HoldRules) -> None:
        self.r = rules
        self.held: dict[str, list[tuple[int, int]]] = {}
        self.tomb: dict[str, int] = {}
        self.timeout: dict[str, int] = {}

    def _tombstone(self, t: str, last: int, wm: int) -> None:
        until = last + self.r.gap_ms + self.r.retention_ms
        if until > wm:
            self.tomb[t] = self.timeout[t] = until
        else:
            self.timeout.pop(t, None)

    def batch(self, rows: list[tuple[str | None, int, int]], wm: int) -> dict[int, str]:
        out: dict[int, str] = {}
        by_trace: dict[str | None, list[tuple[int, int]]] = {}
        for t, o, e in rows:
            by_trace.setdefault(t, []).append((o, e))
        for t, new in by_trace.items():
            if t is None:
                out.update({o: UNTRACED for o, _ in new})
                continue
            if t in self.tomb:
                out.update({o: LATE for o, _ in new})
                if self.tomb[t] < wm:  # used once more, then expired as if timed out
                    del self.tomb[t], self.timeout[t]
                continue
            allh = self.held.pop(t, []) + new
            times = [e for _, e in allh]
            first, last = min(times), max(times)
            due = min(last + self.r.gap_ms, first + self.r.max_age_ms)
            if len(allh) > self.r.max_hops or first + self.r.max_age_ms <= wm:
                status = EVICTED
            elif due <= wm:
                status = FINAL
            else:
                self.held[t], self.timeout[t] = allh, due
                continue
            out.update({o: status for o, _ in allh})
            self._tombstone(t, last, wm)
        for t, when in list(self.timeout.items()):
            if t in by_trace or when >= wm:
                continue
            if t in self.tomb:
                del self.tomb[t], self.timeout[t]
                continue
            allh = self.held.pop(t)
            last = max(e for _, e in allh)
            status = FINAL if last + self.r.gap_ms < wm else EVICTED
            out.update({o: status for o, _ in allh})
            self._tombstone(t, last, wm)
        return out


@pytest.mark.parametrize("seed", range(40))
def test_deciding_per_bucket_equals_a_state_per_trace(seed: int) -> None:
    rnd = random.Random(seed)
    traces = [f"{i:032x}" for i in range(1, 9)]
    model, bucket = PerTrace(RULES), empty_bucket(COLUMNS)
    offset, wm, clock = 0, 0, 0
    for _ in range(40):
        rows = []
        for _ in range(rnd.randrange(0, 6)):
            offset += 1
            rows.append((rnd.choice([*traces, None]), offset, clock + rnd.randrange(-50, 200)))
        clock += rnd.randrange(0, 150)
        expected = model.batch(rows, wm)
        called = bool(rows) or (bucket is not None and bucket.timeout(RULES) is not None
                                and bucket.timeout(RULES) < wm)
        if called:  # Spark calls the bucket when it has rows or its timeout passed
            step = hold(bucket or empty_bucket(COLUMNS), hops(*rows) if rows else None, wm,
                        RULES)
            got, bucket = verdicts(step), step.bucket
        else:
            got = {}
        assert got == expected, (seed, rows, wm)
        wm = max(wm, clock - 100)


def test_observations_ride_with_their_flow_and_never_count_as_its_hops() -> None:
    a, b = "a" * 32, "b" * 32
    rows = pd.DataFrame([(a, 1, 1000, "hop"), (a, 50, 1040, "fetch"), (b, 60, 1200, "fetch")],
                        columns=[*COLUMNS, "kind"])
    step = hold(empty_bucket([*COLUMNS, "kind"]), rows, 900, RULES)
    # The flow's due time is its hop's (1000 + gap), not the observation's.
    assert step.emitted == [] and step.bucket.timeout(RULES) == 1100
    done = hold(step.bucket, None, 1101, RULES)
    assert verdicts(done) == {1: FINAL, 50: FINAL}
    # b never had a hop: its observation waits the gap after it, then goes without a verdict.
    assert done.bucket.timeout(RULES) == 1300 and len(done.bucket.held) == 1
    gone = hold(done.bucket, None, 1301, RULES)
    assert gone.emitted == [] and len(gone.bucket.held) == 0
    # An observation of a finished trace is late like a hop (the caller reads its kind).
    late = hold(gone.bucket, pd.DataFrame([(a, 70, 1302, "fetch")],
                                          columns=[*COLUMNS, "kind"]), 1302, RULES)
    assert verdicts(late) == {70: LATE}
