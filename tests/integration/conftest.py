"""Fixtures of the integration tests: a Herald running the requesting module's chains, and the
OTLP/HTTP receiver Herald exports spans to (for the tracing and the routing tests)."""

from __future__ import annotations

import gzip
import http.server
import threading
from collections.abc import Iterator

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from proxy.devtools.embedded_kafka import KafkaCluster, free_port
from tests.support.herald_process import HeraldProcess, herald_config
from tests.support.otlp_receiver import Receiver


@pytest.fixture(scope="module")
def receiver() -> Iterator[tuple[Receiver, int]]:
    collected = Receiver()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            if self.path == "/v1/traces":
                collected.add(request)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200 if self.path == "/v1/traces" else 404)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield collected, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def herald_chain(request: pytest.FixtureRequest, kafka: KafkaCluster) -> Iterator[HeraldProcess]:
    """Herald in front of the session broker with the requesting module's `CHAINS` and an admin
    endpoint; the process is the module's own, so no other module's traffic moves its counters."""
    config = herald_config(kafka.bootstrap, interceptors=request.module.CHAINS,
                           admin={"bind": f"127.0.0.1:{free_port()}"})
    with HeraldProcess(config) as proc:
        yield proc
