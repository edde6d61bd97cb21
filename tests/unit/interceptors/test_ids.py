"""Record ids: the ids of a batch made at once are those one call per record would make."""

from __future__ import annotations

import re
import uuid

from interceptors import ids

UUID7 = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def test_uuid7_many_gives_the_ids_of_as_many_uuid7_calls():
    prefix = ids.uuid7_prefix(1_700_000_000_123)
    ids.seed(42)
    one_by_one = [ids.uuid7(prefix) for _ in range(20)]
    ids.seed(42)
    assert ids.uuid7_many(prefix, 20) == one_by_one
    assert len(set(one_by_one)) == 20
    for u in one_by_one:
        assert UUID7.fullmatch(u)
        parsed = uuid.UUID(u.decode())
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
        assert parsed.int >> 80 == 1_700_000_000_123


def test_uuid7_many_puts_the_prefix_in_front():
    ids.seed(1)
    plain = ids.uuid7_many(b"0123", 3)
    ids.seed(1)
    assert ids.uuid7_many(b"head|0123", 3) == [b"head|" + u for u in plain]


def test_variant_digits_are_spread_evenly():
    ids.seed(7)
    digits = [u[19:20] for u in ids.uuid7_many(ids.uuid7_prefix(0), 4000)]
    counts = {d: digits.count(d) for d in (b"8", b"9", b"a", b"b")}
    assert sum(counts.values()) == 4000
    assert all(800 < c < 1200 for c in counts.values()), counts


def test_trace_draws_are_the_draws_of_as_many_new_trace_ids_calls():
    ids.seed(3)
    one_by_one = [ids.new_trace_ids() for _ in range(10)]
    ids.seed(3)
    raw = ids.trace_draws(10)
    assert len(raw) == 240
    chunks = [raw[i:i + 24] for i in range(0, 240, 24)][::-1]  # the first call's last
    assert [(int.from_bytes(c[:16], "big"), int.from_bytes(c[16:], "big")) for c in chunks] == (
        one_by_one)
