"""The Headers API: KIP-82 semantics (order kept, keys repeat, null values) and change tracking."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from interceptors.headers import HeaderBlock, Headers
from interceptors.testing import FakeRecord


def test_reads_follow_kafka_conventions():
    h = Headers([("a", b"1"), ("b", None), ("a", b"2")])
    assert list(h) == [("a", b"1"), ("b", None), ("a", b"2")]
    assert len(h) == 3
    assert "a" in h and "b" in h and "c" not in h
    assert h.last("a") == b"2"
    assert h.first("a") == b"1"
    assert h.all("a") == [b"1", b"2"]
    assert h.count("a") == 2
    assert h.last("b", b"default") is None  # present with a null value
    assert h.last("c", b"default") == b"default"
    assert h.keys() == ["a", "b", "a"]


def test_wraps_without_copying_until_changed():
    original = [("a", b"1")]
    h = Headers(original)
    assert h.to_list() == original
    h.add("b", b"2")
    assert original == [("a", b"1")]  # the record's own list is never edited in place
    assert list(h) == [("a", b"1"), ("b", b"2")]
    assert h.changed and h.added == 1


def test_add_keeps_duplicates_and_order():
    h = Headers()
    h.add("k", b"1")
    h.add("k", b"2")
    h.add("j", None)
    assert list(h) == [("k", b"1"), ("k", b"2"), ("j", None)]


def test_remove_removes_every_occurrence():
    h = Headers([("a", b"1"), ("b", b"2"), ("a", b"3")])
    assert h.remove("a") == 2
    assert list(h) == [("b", b"2")]
    assert h.remove("zzz") == 0


def test_set_replaces_in_place_of_the_first_and_drops_the_rest():
    h = Headers([("x", b"0"), ("a", b"1"), ("y", b"0"), ("a", b"2")])
    h.set("a", b"new")
    assert list(h) == [("x", b"0"), ("a", b"new"), ("y", b"0")]
    h.set("z", None)
    assert list(h)[-1] == ("z", None)


def test_noop_operations_do_not_count_as_changes():
    h = Headers([("a", b"1")])
    h.remove("b")
    h.set("a", b"1")
    h.remove_if(lambda k: k.startswith("zz"))
    h.rename("nope", "other")
    assert not h.changed
    record = FakeRecord(headers=[("a", b"1")])
    assert Headers(record.headers).commit_to(record) is False
    assert record.assignments == []


def test_commit_assigns_only_real_changes():
    record = FakeRecord(headers=[("a", b"1")])
    h = Headers(record.headers)
    h.add("b", b"2")
    h.remove("b")  # back to the original content
    assert h.changed
    assert h.commit_to(record) is False
    assert record.assignments == []

    h = Headers(record.headers)
    h.add("c", b"3")
    assert h.commit_to(record) is True
    assert record.headers == [("a", b"1"), ("c", b"3")]
    assert record.assignments == ["headers"]


def test_rename_keeps_position_and_value():
    h = Headers([("old", b"1"), ("x", b"2"), ("old", None)])
    assert h.rename("old", "new") == 2
    assert list(h) == [("new", b"1"), ("x", b"2"), ("new", None)]


def test_extend_and_clear():
    h = Headers([("a", b"1")])
    h.extend([("b", b"2"), ("c", bytearray(b"3"))])
    assert list(h) == [("a", b"1"), ("b", b"2"), ("c", b"3")]
    assert h.added == 2
    h.clear()
    assert list(h) == []


@pytest.mark.parametrize(
    ("key", "value"), [(b"bytes-key", b"v"), ("k", "text"), ("k", 1), (None, b"v")]
)
def test_type_errors(key, value):
    with pytest.raises(TypeError):
        Headers().add(key, value)
    with pytest.raises(TypeError):
        Headers().extend([(key, value)])
    with pytest.raises(TypeError):
        Headers().set(key, value)
    with pytest.raises(TypeError):
        HeaderBlock([("ok", b"1"), (key, value)])


def test_header_blocks_are_checked_once_and_extend_as_they_are():
    block = HeaderBlock(iter([("a", b"1"), ("b", bytearray(b"2")), ("c", None)]))
    assert block == (("a", b"1"), ("b", b"2"), ("c", None)) and isinstance(block, tuple)
    original = [("x", b"0")]
    h = Headers(original)
    h.extend(block)
    h.extend(HeaderBlock())
    assert list(h) == [("x", b"0"), *block] and original == [("x", b"0")]
    assert h.added == 3 and h.mutations == 1


def test_commit_hands_the_list_over_and_later_changes_copy_it():
    record = FakeRecord(headers=[("a", b"1")])
    h = Headers(record.current_headers())
    h.add("b", b"2")
    assert h.commit_to(record) and record.assignments == ["headers"]
    committed = record.headers
    h.add("c", b"3")  # the record's list is not edited behind its back
    assert committed == [("a", b"1"), ("b", b"2")]
    assert h.commit_to(record) and record.headers == [("a", b"1"), ("b", b"2"), ("c", b"3")]
    h.remove("c")
    h.add("c", b"3")
    assert h.commit_to(record) is False  # the same content as the record already has


def test_read_only_headers_refuse_changes_but_allow_noops():
    h = Headers([("a", b"1")], readonly=True)
    h.remove("missing")
    h.set("a", b"1")
    for change in (lambda: h.add("b", b"2"), lambda: h.remove("a"),
                   lambda: h.set("a", b"2"), lambda: h.rename("a", "b"), h.clear):
        with pytest.raises(TypeError, match="read-only"):
            change()
    assert list(h) == [("a", b"1")] and not h.changed


keys = st.sampled_from(["a", "b", "c", "traceparent"])
values = st.one_of(st.none(), st.binary(max_size=4))
operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), keys, values),
        st.tuples(st.just("remove"), keys, st.none()),
        st.tuples(st.just("set"), keys, values),
        st.tuples(st.just("rename"), keys, keys),
    ),
    max_size=12,
)


@given(st.lists(st.tuples(keys, values), max_size=6), operations)
def test_matches_a_plain_list_model(initial, ops):
    """Every operation does what the list semantics say, and `changed` is honest."""
    model = list(initial)
    h = Headers(list(initial))
    for op, key, arg in ops:
        if op == "add":
            h.add(key, arg)
            model.append((key, arg))
        elif op == "remove":
            h.remove(key)
            model = [p for p in model if p[0] != key]
        elif op == "set":
            h.set(key, arg)
            positions = [i for i, p in enumerate(model) if p[0] == key]
            if positions:
                first = positions[0]
                model = [p for i, p in enumerate(model) if i == first or p[0] != key]
                model[first] = (key, arg)
            else:
                model.append((key, arg))
        else:
            h.rename(key, arg)
            model = [(arg if k == key else k, v) for k, v in model]
        assert list(h) == model
        assert h.last(key) == next((v for k, v in reversed(model) if k == key), None)
    record = FakeRecord(headers=list(initial))
    assert h.commit_to(record) == (model != list(initial))
    assert record.headers == model
