"""`herald k8s webhook`: the command line of the admission webhook."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

import trio

from configuration import ConfigError, HostPort, parse_host_port
from proxy.k8s import admission, sidecar
from proxy.k8s.inject import InjectError, InjectOptions
from proxy.k8s.sidecar_options import add_sidecar_arguments, options_from
from proxy.k8s.webhook_server import Limits, WebhookServer
from proxy.net.config import ListenError
from proxy.observability.logs import configure, get_logger
from proxy.security.config import ServerTlsConfig
from proxy.security.tls import ReloadingContext, TlsSetupError

log = get_logger("webhook")

_ANNOTATION_HELP = "\n".join(f"  {key}: {text}" for key, text in admission.ANNOTATIONS.items())

WEBHOOK_HELP = f"""\
Serve a Kubernetes mutating admission webhook (AdmissionReview {admission.API_VERSION}, over
HTTPS) that adds the Herald sidecar to pods as they are created: the same sidecar, from the same
code, as `herald k8s inject --config-in-pod` (proxy.yaml travels in the pod's
{sidecar.CONFIG_ANNOTATION} annotation, mounted through the downward API, so no ConfigMap is
needed in the pod's namespace). The flags below set what every pod gets; a pod's annotations
override some of them.

Routes: POST /mutate/namespace injects every pod it is sent (the API server sends those of
namespaces that opted in) unless the pod opts out; POST /mutate/pod injects only pods that opt
in themselves. GET /healthz, /readyz and /metrics answer on the same server, and on
--health-listen in plain HTTP when given.

Pod annotations (labels too, for {admission.INJECT}):
{_ANNOTATION_HELP}

A pod already marked {sidecar.INJECTED} is left as it is. A pod that cannot be injected is
allowed unchanged, with a warning to its creator and a log event. A request that is not an
AdmissionReview gets HTTP 400, one over --max-review-bytes 413; the API server then applies the
webhook's failurePolicy.
"""


def add_webhook_parser(k8s_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = k8s_sub.add_parser("webhook", help="serve the mutating admission webhook that adds "
                           "the Herald sidecar to pods", description=WEBHOOK_HELP,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", default="0.0.0.0:8443", metavar="HOST:PORT",
                   help="HTTPS address for AdmissionReviews (default 0.0.0.0:8443)")
    p.add_argument("--cert", type=Path, required=True,
                   help="server certificate (PEM; re-read when the file changes)")
    p.add_argument("--key", type=Path, required=True, help="its private key (PEM)")
    p.add_argument("--health-listen", metavar="HOST:PORT",
                   help="also serve /healthz, /readyz, /metrics in plain HTTP here")
    p.add_argument("--max-review-bytes", type=int, default=Limits.max_body, metavar="N",
                   help=f"largest AdmissionReview accepted (default {Limits.max_body})")
    p.add_argument("--request-timeout-s", type=float, default=Limits.request_timeout_s,
                   help="a request must arrive whole within this (default "
                        f"{Limits.request_timeout_s:g})")
    p.add_argument("--max-connections", type=int, default=Limits.max_connections, metavar="N",
                   help="open HTTPS connections at most; more are closed at once (default "
                        f"{Limits.max_connections})")
    p.add_argument("--shutdown-grace-s", type=float, default=5.0,
                   help="on SIGTERM, report not ready and keep answering this long (default 5)")
    p.add_argument("--log-level", default="info",
                   choices=["debug", "info", "warning", "error"])
    p.add_argument("--log-format", default="json", choices=["json", "kv"])
    add_sidecar_arguments(p)
    p.add_argument("--config-map", metavar="NAME",
                   help="every pod reads proxy.yaml from this ConfigMap (it must exist in "
                        "each namespace) instead of its own annotation")


def _fail(message: str) -> int:
    print(f"herald k8s webhook: {message}", file=sys.stderr)
    return 2


def run_webhook(args: argparse.Namespace) -> int:
    configure(args.log_level, args.log_format)
    try:
        options: InjectOptions = options_from(args, config_in_pod=args.config_map is None)
    except InjectError as exc:
        return _fail(str(exc))
    try:
        listen = parse_host_port(args.listen, "--listen")
        health = parse_host_port(args.health_listen, "--health-listen") if (
            args.health_listen) else None
    except ConfigError as exc:
        return _fail("; ".join(exc.errors))
    if args.max_review_bytes < 1024 or args.request_timeout_s <= 0 or args.max_connections < 1:
        return _fail("--max-review-bytes must be at least 1024, --request-timeout-s above 0, "
                     "--max-connections at least 1")
    try:
        tls = ReloadingContext(ServerTlsConfig(cert_file=args.cert, key_file=args.key,
                                               path="--cert/--key"))
    except TlsSetupError as exc:
        return _fail(str(exc))
    server = WebhookServer(options, tls, Limits(max_body=args.max_review_bytes,
                                                request_timeout_s=args.request_timeout_s,
                                                max_connections=args.max_connections))
    try:
        trio.run(_main, server, listen, health, args.shutdown_grace_s)
    except ListenError as exc:
        return _fail(str(exc))
    return 0


async def _main(server: WebhookServer, listen: HostPort, health: HostPort | None,
                grace_s: float) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve, listen)
            if health is not None:
                await nursery.start(server.serve, health, False)
            server.ready = True
            async for signum in signals:
                log.info("webhook_stopping", signal=signal.Signals(signum).name,
                         grace_s=grace_s)
                server.draining = True
                await trio.sleep(grace_s)
                nursery.cancel_scope.cancel()
                break
