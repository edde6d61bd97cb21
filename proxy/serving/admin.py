"""The admin HTTP endpoint: /metrics, /healthz, /readyz.

A deliberately tiny HTTP/1.1 server on trio (GET only, one response per connection): it lives
in the proxy's own event loop, so /healthz answering means that loop is serving, and /readyz
can read the proxy's state directly instead of guessing from outside.

Bound beyond loopback it can serve HTTPS (`admin.tls`) and ask for a bearer token on
/metrics (`admin.token`), which shows topic names and client activity. The probes stay open:
they reveal nothing and the kubelet calls them without credentials.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

import trio
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from configuration import ConfigError, HostPort
from proxy.net.config import ListenError
from proxy.observability.logs import get_logger
from proxy.observability.metrics import Metrics
from proxy.security.config import SecretRef
from proxy.security.tls import ReloadingContext
from proxy.serving.accepting import Accepting

log = get_logger("admin")

_MAX_REQUEST = 8192
_TEXT = "text/plain; charset=utf-8"
_REASONS = {200: "OK", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
            503: "Service Unavailable"}


class AdminServer:
    def __init__(
        self,
        bind: HostPort,
        metrics: Metrics,
        readiness: Callable[[], tuple[bool, str]],
        tls: ReloadingContext | None = None,
        token: SecretRef | None = None,
        accepting: Accepting | None = None,
    ) -> None:
        """`accepting`: the proxy's, so that running out of descriptors is one episode for
        every port (default: one of the admin endpoint's own)."""
        self.bind = bind
        self.metrics = metrics
        self.readiness = readiness
        self.tls = tls
        self.token = token
        self.accepting = accepting or Accepting(
            lambda reason: metrics.accept_errors.labels(reason).inc())

    async def serve(self, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            listeners = await trio.open_tcp_listeners(self.bind.port, host=self.bind.host)
        except OSError as exc:
            raise ListenError(f"admin.bind {self.bind}: {exc.strerror or exc}") from exc
        port = listeners[0].socket.getsockname()[1]
        log.info("admin_listening", address=f"{self.bind.host}:{port}")
        task_status.started(port)
        async with trio.open_nursery() as handlers:
            await self.accepting.serve_all(listeners, "admin", handlers, self._handle)

    async def _handle(self, raw: trio.SocketStream) -> None:
        stream: trio.abc.Stream = raw
        if self.tls is not None:
            stream = trio.SSLStream(raw, self.tls.context, server_side=True)
        try:
            with trio.move_on_after(10):
                request = b""
                while b"\r\n\r\n" not in request and len(request) < _MAX_REQUEST:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        return
                    request += chunk
                line = request.split(b"\r\n", 1)[0].decode("latin-1")
                parts = line.split(" ")
                if len(parts) != 3:
                    return
                method, target = parts[0], parts[1].split("?", 1)[0]
                if target == "/metrics" and not self._authorized(request):
                    status, ctype, body = 401, _TEXT, b"bearer token required\n"
                else:
                    status, ctype, body = self._route(method, target)
                extra = 'WWW-Authenticate: Bearer realm="herald"\r\n' if status == 401 else ""
                head = (
                    f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {ctype}\r\n"
                    f"{extra}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                ).encode()
                await stream.send_all(head + (body if method != "HEAD" else b""))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # includes failed TLS handshakes: a scanner or a client without our CA
        finally:
            try:
                await stream.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass

    def _authorized(self, request: bytes) -> bool:
        if self.token is None:
            return True
        try:
            expected = self.token.read().encode()
        except ConfigError as exc:
            log.error("admin_token_unreadable", error=str(exc))
            return False
        for line in request.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"authorization":
                scheme, _, given = value.strip().partition(b" ")
                if scheme.lower() == b"bearer":
                    return hmac.compare_digest(given.strip(), expected)
        return False

    def _route(self, method: str, target: str) -> tuple[int, str, bytes]:
        text = "text/plain; charset=utf-8"
        if method not in ("GET", "HEAD"):
            return 405, text, b"GET only\n"
        if target == "/metrics":
            self.metrics.refresh()
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.metrics.registry)
        if target == "/healthz":
            return 200, text, b"ok\n"
        if target == "/readyz":
            ready, why = self.readiness()
            return (200 if ready else 503), text, (why + "\n").encode()
        return 404, text, b"not found\n"
