"""A minimal SOCKS5 proxy whose outgoing connections leave from a chosen source address.

Herald tells clients apart by their source address (a gateway sees each pod by its IP), and
librdkafka has no setting to bind one. A client whose connections go through this proxy (the
kafka-python clients' `proxy_url`) reaches Herald from `source` (``127.0.0.2``: any loopback
address works on Linux), so one test machine can play several pods. Only what those clients
use is spoken: no authentication, CONNECT, IPv4 or domain name targets.
"""

from __future__ import annotations

import socket
import struct
import threading


class SourceSocks:
    def __init__(self, source: str) -> None:
        self.source = source
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"socks5://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            _, methods = _read(client, 2)
            _read(client, methods)
            client.sendall(b"\x05\x00")  # no authentication
            _, command, _, kind = _read(client, 4)
            if kind == 1:
                host = socket.inet_ntoa(_read(client, 4))
            elif kind == 3:
                host = _read(client, _read(client, 1)[0]).decode()
            else:
                raise OSError(f"address type {kind} not spoken here")
            (port,) = struct.unpack(">H", _read(client, 2))
            if command != 1:
                raise OSError("only CONNECT is spoken here")
            upstream = socket.create_connection((host, port), source_address=(self.source, 0))
        except OSError:
            client.close()
            return
        bound, bound_port = upstream.getsockname()[:2]
        client.sendall(b"\x05\x00\x00\x01" + socket.inet_aton(bound)
                       + struct.pack(">H", bound_port))
        self._socks += [client, upstream]
        threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()
        _pump(client, upstream)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        for s in self._socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def __enter__(self) -> SourceSocks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        more = sock.recv(n - len(data))
        if not more:
            raise OSError("closed during the SOCKS exchange")
        data += more
    return data


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy until either side ends, then end the other."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
