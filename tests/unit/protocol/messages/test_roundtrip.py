"""Property tests over every generated message and version.

* ``decode(encode(m)) == m`` and ``encode(decode(b)) == b`` for messages built from the specs;
* hostile input (truncated, mutated, random bytes, absurd lengths) raises only CodecError,
  promptly and without allocating more than a small multiple of the input.

``HERALD_PROPERTY_EXAMPLES`` raises the number of examples per version (default 15).
"""

from __future__ import annotations

import os
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.errors import CodecError
from proxy.devtools.codegen import load_messages
from tests.support.message_strategies import (
    all_message_versions,
    message_strategy,
    module_for,
    sample_message,
)

EXAMPLES = int(os.environ.get("HERALD_PROPERTY_EXAMPLES", "15"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CASES = all_message_versions()
IDS = [f"{name}-v{v}" for name, v in CASES]


def message_class(name: str) -> Any:
    return getattr(module_for(load_messages()[name]), name)


@pytest.mark.parametrize(("name", "version"), CASES, ids=IDS)
@PROPERTY
@given(data=st.data())
def test_round_trip(name: str, version: int, data: st.DataObject) -> None:
    cls = message_class(name)
    msg = data.draw(message_strategy(name, version))
    wire = msg.encode(version)
    decoded = cls.decode(wire, version)
    assert decoded == msg
    assert decoded.encode(version) == wire
    # the same bytes, embedded in a larger buffer and passed as a memoryview
    framed = memoryview(b"HDR" + wire)
    again, end = cls.decode_from(framed, version, 3)
    assert end == len(framed)
    assert again == msg


def decode_or_codec_error(cls: Any, data: bytes | memoryview, version: int) -> Any:
    try:
        return cls.decode(data, version)
    except CodecError:
        return None


@pytest.mark.parametrize(("name", "version"), CASES, ids=IDS)
@PROPERTY
@given(data=st.data())
def test_hostile_input(name: str, version: int, data: st.DataObject) -> None:
    cls = message_class(name)
    wire = data.draw(message_strategy(name, version)).encode(version)
    # every strict prefix is truncated
    cuts = {0, len(wire) // 2, len(wire) - 1} | set(range(0, len(wire), 7))
    for cut in sorted(c for c in cuts if 0 <= c < len(wire)):
        with pytest.raises(CodecError):
            cls.decode(wire[:cut], version)
    # mutations and random bytes: CodecError or a message that re-encodes stably
    mutated = bytearray(wire)
    for _ in range(data.draw(st.integers(1, 4))):
        if mutated:
            i = data.draw(st.integers(0, len(mutated) - 1))
            mutated[i] = data.draw(st.integers(0, 255))
    candidates = [bytes(mutated), wire + b"\x00", data.draw(st.binary(max_size=64))]
    for candidate in candidates:
        decoded = decode_or_codec_error(cls, candidate, version)
        if decoded is not None:
            once = decoded.encode(version)
            assert cls.decode(once, version).encode(version) == once


HUGE_LENGTHS = [
    b"\x7f\xff\xff\xff",  # int32 2**31 - 1
    b"\x80\x00\x00\x00",  # int32 -2**31
    b"\x7f\xff",  # int16 32767
    b"\xff\xff\xff\xff\x07",  # unsigned varint 2**31 - 1
    b"\xff\xff\xff\xff\x0f",  # unsigned varint 2**32 - 1
]


@pytest.mark.parametrize(("name", "version"), CASES, ids=IDS)
def test_claimed_huge_lengths_do_not_allocate(name: str, version: int) -> None:
    """Splice absurd lengths at every offset of a real message: no big allocation, ever."""
    cls = message_class(name)
    wire = sample_message(name, version).encode(version)
    tracemalloc.start()
    try:
        for pos in range(len(wire)):
            for huge in HUGE_LENGTHS:
                for candidate in (
                    wire[:pos] + huge + wire[pos + len(huge) :],
                    wire[:pos] + huge + wire[pos:],
                ):
                    decode_or_codec_error(cls, candidate, version)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024 + 64 * len(wire)


@pytest.mark.parametrize(("name", "version"), CASES, ids=IDS)
def test_sample_round_trip(name: str, version: int) -> None:
    msg = sample_message(name, version)
    wire = msg.encode(version)
    assert message_class(name).decode(wire, version) == msg


@pytest.mark.parametrize("name", sorted(load_messages()))
def test_unsupported_versions(name: str) -> None:
    cls = message_class(name)
    with pytest.raises(CodecError):
        cls.decode(b"", cls.MAX_VERSION + 1)
    with pytest.raises(CodecError):
        cls.decode(b"", -1)
    with pytest.raises(CodecError):
        cls().encode(cls.MAX_VERSION + 1)
