"""The pumps' socket helpers over a real socket pair: partial writes, waiting, end of stream."""

from __future__ import annotations

import socket

import trio

from proxy.net import sockio


async def test_send_all_survives_a_full_buffer_and_receive_sees_every_byte() -> None:
    a, b = socket.socketpair()
    left, right = trio.socket.from_stdlib_socket(a), trio.socket.from_stdlib_socket(b)
    data = bytes(range(256)) * 40_000  # 10 MB: far more than a socket buffer holds
    got = bytearray()
    waits = []

    async def read_all() -> None:
        while True:
            chunk, waited = await sockio.receive(right, 1 << 20)
            waits.append(waited)
            if not chunk:
                return
            got.extend(chunk)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_all)
        await sockio.send_all(left, data)
        left.close()
    assert bytes(got) == data
    assert any(waits), "the reader had to wait for data at least once"
    right.close()


async def test_receive_reports_no_wait_when_data_is_already_there() -> None:
    a, b = socket.socketpair()
    left, right = trio.socket.from_stdlib_socket(a), trio.socket.from_stdlib_socket(b)
    await sockio.send_all(left, b"ready")
    assert await sockio.receive(right, 100) == (b"ready", False)
    left.close()
    assert await sockio.receive(right, 100) == (b"", False)
    right.close()
