"""The cheapest relays Python can be: bytes in, bytes out, nothing parsed.

    python bench/relay_floor.py --loop epoll|trio LISTEN_PORT UPSTREAM_PORT

`bench_cost.py --floors` measures them beside Herald in the same rounds, so the figures show
how much of Herald's CPU is the price of its runtime (the interpreter, and trio's event loop
on every wake-up) and how much is its own work. `epoll` is a loop on `select.epoll` with no
framework; `trio` is the same two pumps per connection as tasks on trio, waiting the way
Herald's sockets do (`trio.lowlevel.wait_readable` / `wait_writable` on non-blocking
sockets). Prints `relay ready` once listening.
"""

from __future__ import annotations

import argparse
import select
import socket

_RECV = 256 * 1024


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _listener(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    return sock


def run_epoll(listen_port: int, upstream_port: int) -> None:
    """One thread, one epoll; a write that would block finishes blocking (a benchmark load
    never fills a socket buffer for long, and this keeps the loop as small as it can be)."""
    listener = _listener(listen_port)
    listener.setblocking(False)
    poller = select.epoll()
    poller.register(listener.fileno(), select.EPOLLIN)
    pairs: dict[int, tuple[socket.socket, socket.socket]] = {}
    print("relay ready", flush=True)
    while True:
        for fd, _ in poller.poll():
            if fd == listener.fileno():
                client, _ = listener.accept()
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                upstream = _connect(upstream_port)
                for sock in (client, upstream):
                    sock.setblocking(False)
                pairs[client.fileno()] = (client, upstream)
                pairs[upstream.fileno()] = (upstream, client)
                poller.register(client.fileno(), select.EPOLLIN)
                poller.register(upstream.fileno(), select.EPOLLIN)
                continue
            source, sink = pairs[fd]
            try:
                data = source.recv(_RECV)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                for sock in (source, sink):
                    pairs.pop(sock.fileno(), None)
                    try:
                        poller.unregister(sock.fileno())
                    except (OSError, ValueError):
                        pass
                    sock.close()
                continue
            sink.setblocking(True)
            try:
                sink.sendall(data)
            except OSError:
                pass
            sink.setblocking(False)


def run_trio(listen_port: int, upstream_port: int) -> None:
    import trio

    async def pump(source: socket.socket, sink: socket.socket) -> None:
        while True:
            try:
                data = source.recv(_RECV)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(source)
                continue
            if not data:
                return
            view = memoryview(data)
            while view:
                try:
                    view = view[sink.send(view):]
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(sink)

    async def serve(client: socket.socket) -> None:
        upstream = _connect(upstream_port)
        for sock in (client, upstream):
            sock.setblocking(False)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(pump, client, upstream)
                nursery.start_soon(pump, upstream, client)
        except OSError:
            pass
        finally:
            client.close()
            upstream.close()

    async def main() -> None:
        listener = _listener(listen_port)
        listener.setblocking(False)
        print("relay ready", flush=True)
        async with trio.open_nursery() as nursery:
            while True:
                await trio.lowlevel.wait_readable(listener)
                try:
                    client, _ = listener.accept()
                except BlockingIOError:
                    continue
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                nursery.start_soon(serve, client)

    trio.run(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loop", choices=("epoll", "trio"), required=True)
    parser.add_argument("listen_port", type=int)
    parser.add_argument("upstream_port", type=int)
    args = parser.parse_args()
    (run_epoll if args.loop == "epoll" else run_trio)(args.listen_port, args.upstream_port)


if __name__ == "__main__":
    main()
