"""A broker port that cannot be bound is tried again, and known as unbound until it is: the
directory asks for the listener at every learn, and the listener set keeps the reason that
/readyz gives."""

from __future__ import annotations

import socket

import trio
import trio.testing

from configuration import HostPort
from proxy.serving.accepting import Accepting
from proxy.serving.config import ListenConfig
from proxy.serving.listeners import Listeners
from proxy.upstream.brokers import BrokerDirectory


def _taken_port() -> socket.socket:
    """A loopback port held by a listening socket of this test."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return holder


async def _connects(port: int) -> bool:
    try:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
    except OSError:
        return False
    await stream.aclose()
    return True


async def test_a_port_that_could_not_be_bound_is_bound_once_it_is_free() -> None:
    served: list[str] = []

    async def handle(stream: trio.SocketStream, target: str) -> None:
        served.append(target)
        await stream.aclose()

    holder = _taken_port()
    port = holder.getsockname()[1]
    base = port - 3  # broker 3's port is the held one
    listeners = Listeners("127.0.0.1", handle, Accepting(lambda reason: None))

    async def open_listener(node_id: int) -> None:
        await listeners.open_broker(node_id, base + node_id)

    directory = BrokerDirectory(ListenConfig(HostPort("127.0.0.1", 9092), "127.0.0.1", base),
                                open_listener)
    async with trio.open_nursery() as nursery:
        listeners.start(nursery, nursery)
        assert await directory.learn(3, "10.0.0.3", 9092) == ("127.0.0.1", port)
        assert list(listeners.unbound) == [port]
        assert listeners.unbound[port].startswith(
            f"cannot listen on port {port} for broker 3: ")
        await directory.learn(3, "10.0.0.3", 9092)  # the same broker again: still held
        assert list(listeners.unbound) == [port]

        holder.close()
        await directory.learn(3, "10.0.0.3", 9092)
        assert listeners.unbound == {}
        assert await _connects(port)
        await trio.testing.wait_all_tasks_blocked()
        assert served == ["broker-3"]
        await directory.learn(3, "10.0.0.3", 9092)  # open: nothing more happens
        assert listeners.unbound == {}
        nursery.cancel_scope.cancel()


async def test_a_port_of_a_broker_that_left_is_no_longer_waited_for() -> None:
    async def handle(stream: trio.SocketStream, target: str) -> None:
        await stream.aclose()

    holders = [_taken_port(), _taken_port()]
    ports = [h.getsockname()[1] for h in holders]
    listeners = Listeners("127.0.0.1", handle, Accepting(lambda reason: None))
    async with trio.open_nursery() as nursery:
        listeners.start(nursery, nursery)
        for node_id, port in enumerate(ports):
            await listeners.open_broker(node_id, port)
        assert sorted(listeners.unbound) == sorted(ports)
        listeners.keep_unbound([ports[1]])  # broker 0 left the cluster
        assert list(listeners.unbound) == [ports[1]]
        nursery.cancel_scope.cancel()
    for holder in holders:
        holder.close()
