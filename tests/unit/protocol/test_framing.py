import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import CodecError
from protocol.framing import FrameDecoder, FrameTooLarge, frame


@given(st.lists(st.binary(max_size=300), max_size=20), st.integers(1, 64))
def test_frames_come_out_whole_whatever_the_chunking(payloads: list[bytes], chunk: int) -> None:
    stream = b"".join(frame(p) for p in payloads)
    decoder = FrameDecoder()
    out: list[bytes] = []
    for i in range(0, len(stream), chunk):
        decoder.feed(stream[i : i + chunk])
        out.extend(decoder.frames())
    assert out == payloads
    assert decoder.buffered == 0


def test_oversized_frame_is_refused_from_its_size_alone() -> None:
    decoder = FrameDecoder(max_frame_bytes=1024)
    decoder.feed(struct.pack(">i", 2**31 - 1))
    with pytest.raises(FrameTooLarge, match="exceeds the limit of 1024"):
        decoder.frames()
    # Nothing near the claimed size was buffered.
    assert decoder.buffered == 4


def test_negative_size_is_malformed() -> None:
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">i", -5))
    with pytest.raises(CodecError, match="negative"):
        decoder.frames()


def test_partial_frame_waits_for_the_rest() -> None:
    decoder = FrameDecoder()
    data = frame(b"hello world")
    decoder.feed(data[:7])
    assert decoder.frames() == []
    decoder.feed(data[7:])
    assert decoder.frames() == [b"hello world"]


def test_the_start_of_an_incomplete_frame_can_be_peeked_and_taken() -> None:
    decoder = FrameDecoder()
    decoder.feed(frame(b"whole") + struct.pack(">i", 1000) + b"part")
    assert decoder.frames() == [b"whole"]
    assert decoder.peek(8) == struct.pack(">i", 1000) + b"part"
    assert decoder.peek(100) == struct.pack(">i", 1000) + b"part"
    assert decoder.take() == struct.pack(">i", 1000) + b"part"
    assert decoder.buffered == 0
    decoder.feed(frame(b"next"))
    assert decoder.frames() == [b"next"]
