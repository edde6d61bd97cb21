"""The admission webhook's HTTPS server: AdmissionReviews in, answers out, on trio.

HTTP/1.1 with keep-alive, as the API server speaks it, and nothing more: a request has a
Content-Length (no chunked bodies), a review is at most `max_body` bytes, and a request must
arrive whole within `request_timeout_s` of its first byte (a new connection's clock starts at
accept, so the TLS handshake counts too). Each connection is its own task: a client that
sends garbage slowly holds only its own connection until its timeout, never another's answer.

The certificate is re-read when its files change (cert-manager renews the Secret mounted as
files): every new connection checks them first (two `stat` calls), so the first connection
after a rotation already gets the new certificate; established connections keep theirs.

Both ports accept as the proxy's do (`proxy/serving/accepting.py`): out of descriptors, one
`accept_paused` warning per episode and `herald_webhook_accept_errors_total`, not a traceback
ten times a second.

Routes: POST /mutate/namespace (pods of opted-in namespaces), POST /mutate/pod (pods that must
opt in themselves); GET /healthz, /readyz, /metrics. The optional plain-HTTP health listener
serves only the GET routes, for probes and Prometheus without the webhook's CA.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import trio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest

from configuration import HostPort
from proxy.k8s import admission
from proxy.k8s.inject import InjectOptions
from proxy.net.config import ListenError
from proxy.observability.logs import get_logger
from proxy.security.tls import ReloadingContext
from proxy.serving.accepting import Accepting

log = get_logger("webhook")

MAX_HEAD = 16 * 1024
LINGER_S = 2.0
LINGER_BYTES = 64 * 1024 * 1024
_JSON = "application/json"
_TEXT = "text/plain; charset=utf-8"
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            408: "Request Timeout", 411: "Length Required", 413: "Content Too Large",
            415: "Unsupported Media Type", 431: "Request Header Fields Too Large",
            503: "Service Unavailable"}
ROUTES = {"/mutate/namespace": True, "/mutate/pod": False}  # path: namespace opted in


class WebhookMetrics:
    """Reviews by outcome (admission.INJECTED ...; `invalid` for HTTP errors), and certificate
    reloads by result, in a registry of the webhook's own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.reviews = Counter("herald_webhook_reviews", "AdmissionReviews answered, by outcome",
                               ["outcome"], registry=self.registry)
        self.rejected = Counter("herald_webhook_rejected_requests",
                                "requests refused with an HTTP error, by status", ["status"],
                                registry=self.registry)
        self.refused_connections = Counter(
            "herald_webhook_refused_connections",
            "review connections closed at once: max_connections were open",
            registry=self.registry)
        self.accept_errors = Counter(
            "herald_webhook_accept_errors",
            "accepts that failed for want of a descriptor or socket memory, by errno",
            ["reason"], registry=self.registry)
        self.tls_reloads = Counter("herald_webhook_tls_reloads",
                                   "certificate reloads, by result (applied, failed)",
                                   ["result"], registry=self.registry)
        for outcome in (admission.INJECTED, admission.REPOINTED, admission.UNCHANGED,
                        admission.SKIPPED, admission.REFUSED, admission.ERROR):
            self.reviews.labels(outcome)


@dataclass(frozen=True)
class Limits:
    max_body: int = 4 * 1024 * 1024
    request_timeout_s: float = 10.0
    idle_timeout_s: float = 60.0
    # Open review connections at most: beyond, a new one is closed at once, so a flood of
    # clients cannot take every file descriptor (the health listener is not counted).
    max_connections: int = 512


@dataclass(frozen=True)
class _Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Reader:
    """Bytes from a stream, with what was read past the current request kept for the next."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buffer = bytearray()  # grows in place: a 4 MiB body is not copied per chunk

    async def _more(self) -> bool:
        chunk = await self.stream.receive_some(65536)
        self.buffer += chunk
        return bool(chunk)

    async def first_byte(self) -> bool:
        return bool(self.buffer) or await self._more()

    async def head(self) -> bytes:
        while b"\r\n\r\n" not in self.buffer:
            if len(self.buffer) > MAX_HEAD:
                raise _HttpError(431, f"request head over {MAX_HEAD} bytes")
            if not await self._more():
                raise EOFError
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        self.buffer = rest
        if len(head) > MAX_HEAD:
            raise _HttpError(431, f"request head over {MAX_HEAD} bytes")
        return bytes(head)

    async def body(self, length: int) -> bytes:
        while len(self.buffer) < length:
            if not await self._more():
                raise EOFError
        body = bytes(self.buffer[:length])
        del self.buffer[:length]
        return body


class WebhookServer:
    def __init__(self, options: InjectOptions, tls: ReloadingContext | None,
                 limits: Limits = Limits(), metrics: WebhookMetrics | None = None) -> None:
        self.options = options
        self.tls = tls
        self.limits = limits
        self.metrics = metrics or WebhookMetrics()
        self.ready = False
        self.draining = False
        self.connections = 0  # open review connections
        # One for both ports, as the proxy's: out of descriptors is the process's episode.
        self.accepting = Accepting(lambda reason: self.metrics.accept_errors.labels(reason).inc(),
                                   lambda: self.connections)

    def readiness(self) -> tuple[bool, str]:
        if self.draining:
            return False, "draining: shutting down"
        return (True, "ready") if self.ready else (False, "starting")

    async def serve(self, bind: HostPort, reviews: bool = True,
                    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve on `bind` (HTTPS when this server has TLS and `reviews`); reports the port."""
        try:
            listeners = await trio.open_tcp_listeners(bind.port, host=bind.host)
        except OSError as exc:
            raise ListenError(f"{bind}: {exc.strerror or exc}") from exc
        port = listeners[0].socket.getsockname()[1]
        log.info("webhook_listening", address=f"{bind.host}:{port}",
                 scheme="https" if reviews and self.tls else "http", reviews=reviews)
        task_status.started(port)
        async with trio.open_nursery() as handlers:
            await self.accepting.serve_all(listeners, "webhook" if reviews else "webhook-health",
                                           handlers, lambda s: self._connection(s, reviews))

    async def _connection(self, raw: trio.SocketStream, reviews: bool) -> None:
        if not reviews:
            await self._serve(raw, reviews)
            return
        if self.connections >= self.limits.max_connections:
            self.metrics.refused_connections.inc()
            log.warning("webhook_connection_refused", open=self.connections,
                        max_connections=self.limits.max_connections)
            await raw.aclose()
            return
        self.connections += 1
        try:
            await self._serve(raw, reviews)
        finally:
            self.connections -= 1

    async def _serve(self, raw: trio.SocketStream, reviews: bool) -> None:
        stream: trio.abc.Stream = raw
        if reviews and self.tls is not None:
            result = self.tls.check()
            if result is not None:
                self.metrics.tls_reloads.labels(result).inc()
            stream = trio.SSLStream(raw, self.tls.context, server_side=True)
        reader = _Reader(stream)
        first = True
        try:
            while True:
                if not first:
                    with trio.move_on_after(self.limits.idle_timeout_s):
                        if not await reader.first_byte():
                            return
                    if not reader.buffer:
                        return  # idle too long: close quietly, as HTTP servers do
                first = False
                keep, status = await self._exchange(reader, stream, reviews)
                if not keep:
                    if status >= 400:
                        await _linger(stream)
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, EOFError):
            pass  # includes failed TLS handshakes: a scanner, or a client without our CA
        except Exception as exc:  # a bug: this connection ends, the server goes on
            log.error("webhook_connection_failed", exc_info=exc)
        finally:
            with trio.move_on_after(1):
                try:
                    await stream.aclose()
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass

    async def _exchange(self, reader: _Reader, stream: trio.abc.Stream,
                        reviews: bool) -> tuple[bool, int]:
        """One request and its answer: whether the connection stays open, and the status."""
        status, ctype, body, keep, head_only = 408, _TEXT, b"", False, False
        with trio.move_on_after(self.limits.request_timeout_s) as timer:
            try:
                request = await self._read(reader)
                head_only = request.method == "HEAD"
                status, ctype, body = self._route(request, reviews)
                keep = request.keep_alive and status < 400
            except _HttpError as exc:
                status, ctype, body = exc.status, _TEXT, (exc.message + "\n").encode()
        if timer.cancelled_caught:
            body = f"request not complete within {self.limits.request_timeout_s:g}s\n".encode()
        if status >= 400:
            self.metrics.rejected.labels(str(status)).inc()
            log.warning("webhook_request_rejected", status=status, reason=body.decode().strip())
        head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\n"
                f"Connection: {'keep-alive' if keep else 'close'}\r\n\r\n").encode()
        with trio.move_on_after(self.limits.request_timeout_s):
            await stream.send_all(head if head_only else head + body)
            return keep, status
        return False, status

    async def _read(self, reader: _Reader) -> _Request:
        head = await reader.head()
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise _HttpError(400, "not an HTTP/1.x request line")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name.strip():
                raise _HttpError(400, f"malformed header line {line[:80]!r}")
            headers[name.strip().lower()] = value.strip()
        if "transfer-encoding" in headers:
            raise _HttpError(411, "chunked bodies are not accepted: send Content-Length")
        length_text = headers.get("content-length", "0")
        if not length_text.isdigit():
            raise _HttpError(400, f"Content-Length: not a length: {length_text[:40]!r}")
        length = int(length_text)
        if length > self.limits.max_body:
            raise _HttpError(413, f"body of {length} bytes is over the limit of "
                                  f"{self.limits.max_body} bytes")
        body = await reader.body(length)
        keep = parts[2] == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        return _Request(parts[0], parts[1].split("?", 1)[0], headers, body, keep)

    def _route(self, request: _Request, reviews: bool) -> tuple[int, str, bytes]:
        target = request.target
        if reviews and target in ROUTES:
            if request.method != "POST":
                raise _HttpError(405, "POST an AdmissionReview here")
            ctype = request.headers.get("content-type", _JSON).split(";")[0].strip().lower()
            if ctype != _JSON:
                raise _HttpError(415, f"expected {_JSON}, got {ctype}")
            return 200, _JSON, self._review(request.body, ROUTES[target])
        if target in ("/healthz", "/readyz", "/metrics"):
            if request.method not in ("GET", "HEAD"):
                raise _HttpError(405, "GET only")
            if target == "/metrics":
                return 200, CONTENT_TYPE_LATEST, generate_latest(self.metrics.registry)
            if target == "/healthz":
                return 200, _TEXT, b"ok\n"
            ready, why = self.readiness()
            return (200 if ready else 503), _TEXT, (why + "\n").encode()
        raise _HttpError(404, f"no route {target[:80]}")

    def _review(self, body: bytes, namespace_opted_in: bool) -> bytes:
        try:
            request = admission.parse_review(body)
        except admission.ReviewError as exc:
            raise _HttpError(400, f"not an AdmissionReview: {exc}") from None
        decision = admission.review(request, self.options, namespace_opted_in)
        self.metrics.reviews.labels(decision.outcome).inc()
        pod = request.get("object")
        meta = pod.get("metadata") if isinstance(pod, dict) else None
        _log_decision(log.info if decision.outcome != admission.REFUSED else log.warning,
                      decision, request, meta)
        return json.dumps(decision.review).encode()


async def _linger(stream: trio.abc.Stream) -> None:
    """Read and drop what the client still sends, for a moment, before closing: a client that
    writes its whole body before reading (most do) then reads our error answer instead of a
    reset connection."""
    dropped = 0
    with trio.move_on_after(LINGER_S):
        while dropped < LINGER_BYTES:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            dropped += len(chunk)


def _log_decision(emit: Callable[..., None], decision: admission.Decision,
                  request: Mapping[str, object], meta: object) -> None:
    meta = meta if isinstance(meta, dict) else {}
    emit("review", uid=request["uid"], namespace=request.get("namespace"),
         pod=meta.get("name") or meta.get("generateName"), operation=request.get("operation"),
         dry_run=bool(request.get("dryRun")), outcome=decision.outcome, reason=decision.reason)
