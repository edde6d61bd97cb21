"""The engine's W3C checks (proxy/native/relay_trace.c) against their reference, the Python
functions the `trace_context` member uses: `valid_traceparent`, and `parse_tracestate` (valid
when it returns members, not None). The engine keeps a record's own traceparent only when both
agree, so they must give the same answer on valid, near-valid and random values."""

from __future__ import annotations

import itertools

from hypothesis import example, given, settings
from hypothesis import strategies as st

from interceptors.tracing import parse_tracestate, valid_traceparent
from tests.support.native_parts import native_module

_relay = native_module("proxy.native._relay")

HEX = "0123456789abcdef"
GIVEN = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def same_traceparent(value: bytes | None) -> None:
    assert _relay.valid_traceparent(value) is valid_traceparent(value), value


def same_tracestate(value: bytes | None) -> None:
    assert _relay.valid_tracestate(value) is (parse_tracestate(value) is not None), value


def hexes(n: int, alphabet: str = HEX) -> st.SearchStrategy[str]:
    return st.text(alphabet, min_size=n, max_size=n)


# A traceparent close to valid: hex fields of the right or nearly right sizes (zeros likely),
# any version, uppercase now and then, and what a later version may append.
near_traceparent = st.builds(
    lambda version, trace, span, flags, tail, sep: (
        f"{version}{sep}{trace}{sep}{span}{sep}{flags}{tail}".encode()),
    st.sampled_from(["00", "01", "fe", "ff", "0A", "cc", "0", "000", "-0", "g0"]) | hexes(2),
    hexes(32) | st.just("0" * 32) | hexes(31) | hexes(33) | hexes(32, HEX + "ABCDEF"),
    hexes(16) | st.just("0" * 16) | hexes(15) | hexes(16, HEX + "ABCDEF-"),
    st.sampled_from(["01", "00", "ff", "1", "0x"]) | hexes(2),
    st.sampled_from(["", "-", "-x", "-what-ever", " ", "x", "--", "-01-02"]),
    st.sampled_from(["-", "-", "-", "_", " "]),
)


# A valid traceparent (any version but ff; a later one may go on after a dash).
valid_tp = st.builds(
    lambda version, trace, span, flags, tail: (
        f"{version}-{trace}-{span}-{flags}{tail if version != '00' else ''}".encode()),
    hexes(2).filter(lambda v: v != "ff"), hexes(32), hexes(16), hexes(2),
    st.sampled_from(["", "-", "-01", "-anything at all"]))


@settings(max_examples=2000, deadline=None)
@given(valid_tp | near_traceparent | st.binary(max_size=80)
       | st.text(HEX + "-ABCDEF \t", max_size=70).map(str.encode))
@example(GIVEN)
@example(None)
@example(GIVEN + b"-")
@example(b"01" + GIVEN[2:] + b"-extra")
@example(b"01" + GIVEN[2:] + b"extra")
@example(b"ff" + GIVEN[2:])
@example(GIVEN[:3] + b"0" * 32 + GIVEN[35:])
@example(GIVEN[:36] + b"0" * 16 + GIVEN[52:])
@example(GIVEN.upper())
@example(b" " + GIVEN[1:])
@example(GIVEN[:54])
def test_traceparent_checks_agree(value: bytes | None) -> None:
    same_traceparent(value)


def test_every_single_byte_change_of_a_traceparent() -> None:
    """Each position of a valid value (and of a version-01 one with a tail) set to each
    byte: the exhaustive neighbourhood of a valid traceparent."""
    for base in (GIVEN, b"01" + GIVEN[2:] + b"-ab"):
        for i, byte in itertools.product(range(len(base)), range(256)):
            same_traceparent(base[:i] + bytes([byte]) + base[i + 1:])
        for n in range(len(base) + 2):
            same_traceparent(base[:n])


key_chars = "abcdefghijklmnopqrstuvwxyz0123456789_*/-"
simple_key = st.builds(lambda a, b: a + b, st.sampled_from("abcz09_@A"),
                       st.text(key_chars + "@A.", max_size=258))
tenant_key = st.builds(lambda t, s: f"{t}@{s}", st.text(key_chars + "A", min_size=0,
                                                          max_size=243),
                       st.text(key_chars + "@", min_size=0, max_size=16))
value_text = st.text(st.characters(min_codepoint=0x09, max_codepoint=0x7f), max_size=258) | \
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e, blacklist_characters=",="),
            min_size=1, max_size=258) | st.sampled_from(["", " ", "v ", " v", "é", "a=b"])
member = st.builds(lambda key, eq, value, pad: f"{pad}{key}{eq}{value}{pad[::-1]}",
                   simple_key | tenant_key, st.sampled_from(["=", "=", "=", ""]), value_text,
                   st.sampled_from(["", "", " ", "\t", " \t", "\n"]))
short_member = st.builds(lambda k, v: f"{k}={v}", st.text("abc", min_size=1, max_size=2),
                         st.text("xyz", min_size=1, max_size=3))
near_tracestate = st.lists(member | short_member | st.just(""), max_size=6).map(
    lambda ms: ",".join(ms).encode()) | st.lists(short_member, min_size=28, max_size=36).map(
    lambda ms: ",".join(ms).encode())


@settings(max_examples=2000, deadline=None)
@given(near_tracestate | st.binary(max_size=60)
       | st.text("ab=,@ \t1-*/Z", max_size=40).map(str.encode))
@example(None)
@example(b"")
@example(b",,, ,\t,")
@example(b"congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
@example(b"a=1,a=2")
@example(",".join(f"k{i}=v" for i in range(32)).encode())
@example(",".join(f"k{i}=v" for i in range(33)).encode())
@example(b"t@" + b"s" * 14 + b"=v")
@example(b"t@" + b"s" * 15 + b"=v")
@example(b"a" * 256 + b"=v")
@example(b"a" * 257 + b"=v")
@example(b"k=" + b"v" * 256)
@example(b"k=" + b"v" * 257)
@example(b"k=v \t")
@example(b"k=\xc3\xa9")
def test_tracestate_checks_agree(value: bytes | None) -> None:
    same_tracestate(value)
