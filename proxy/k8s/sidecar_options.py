"""What a Herald sidecar is made of, from the command line: the flags `herald k8s inject` and
`herald k8s webhook` share, and the injection they describe (with a user's own proxy.yaml
checked as the sidecar will load it)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from configuration import ConfigError, read_yaml
from proxy.config.proxy_yaml import parse_config
from proxy.k8s import sidecar
from proxy.k8s.inject import InjectError, InjectOptions
from proxy.k8s.sidecar import SidecarSpec
from proxy.k8s.sizing import CPU_MS_PER_MB, Throughput

# What `${NAME}` may refer to in a sidecar's proxy.yaml: the variables the sidecar is given.
_SIDECAR_ENV = {"POD_NAME": "pod", "POD_NAMESPACE": "namespace", "NODE_NAME": "node"}

def add_sidecar_arguments(p: argparse.ArgumentParser) -> None:
    """What the sidecar is made of: the same flags for `inject` and for the webhook (whose
    pods may override some of them with annotations)."""
    p.add_argument("--upstream", default="kafka:9092",
                   help="bootstrap HOST:PORT of the real cluster (default: kafka:9092)")
    p.add_argument("--bootstrap-env", action="append", metavar="NAME",
                   help="environment variable of the application that holds the Kafka "
                        "bootstrap; repeatable (default: KAFKA_BOOTSTRAP_SERVERS)")
    p.add_argument("--container", action="append", default=[], metavar="NAME",
                   help="only this application container gets the bootstrap variable, added "
                        "if it has none; repeatable (default: the containers that have it, or "
                        "a pod's only container)")
    p.add_argument("--image", default=SidecarSpec.image, help="Herald's container image")
    p.add_argument("--classic", action="store_true",
                   help="a plain sidecar container (clusters before 1.29; not for Jobs)")
    p.add_argument("--scope", choices=sidecar.LINK_SCOPES, default=sidecar.LINK_SCOPE,
                   help="what scopes the causal links: host (the pod, whatever its client "
                        "ids; default) or client_id")
    p.add_argument("--config", type=Path,
                   help="the proxy.yaml to put in the ConfigMap (default: generated)")
    p.add_argument("--upstream-tls-secret", metavar="SECRET",
                   help="Secret with ca.crt, tls.crt, tls.key for TLS to the brokers")
    p.add_argument("--sasl-secret", metavar="SECRET",
                   help="Secret with username and password Herald authenticates with")
    p.add_argument("--sasl-mechanism", default="SCRAM-SHA-512",
                   choices=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
    p.add_argument("--otlp-endpoint", default="", metavar="URL",
                   help="send Herald's spans over OTLP/HTTP to this collector or APM, for "
                        "example http://jaeger-collector.observability:4318 (default: none)")
    p.add_argument("--produce-mb-s", type=float, default=5.0,
                   help="expected produce MB/s per pod, for the CPU request (default 5)")
    p.add_argument("--consume-mb-s", type=float, default=5.0,
                   help="expected consume MB/s per pod, for the CPU request and the causal "
                        "links' memory (link.capacity; default 5)")
    p.add_argument("--interceptors", choices=sorted(CPU_MS_PER_MB), default="trace_audit_link",
                   help="which measured CPU figures size the request (default "
                        "trace_audit_link: the sidecar's chain)")


def options_from(args: argparse.Namespace, config_in_pod: bool = False) -> InjectOptions:
    """The injection the flags of `add_sidecar_arguments` describe."""
    try:
        load = Throughput(args.produce_mb_s, args.consume_mb_s, args.interceptors)
    except ValueError as exc:
        raise InjectError(str(exc)) from None
    try:
        spec = SidecarSpec(
            upstream=args.upstream, image=args.image, native=not args.classic, load=load,
            upstream_tls_secret=args.upstream_tls_secret, sasl_secret=args.sasl_secret,
            sasl_mechanism=args.sasl_mechanism, link_scope=args.scope,
            otlp_endpoint=args.otlp_endpoint,
        )
    except ValueError as exc:
        raise InjectError(f"--{exc}") from None
    proxy_yaml = None
    if args.config is not None:
        spec, proxy_yaml = _own_config(args.config, spec)
    return InjectOptions(
        spec=spec, bootstrap_env=tuple(args.bootstrap_env or ("KAFKA_BOOTSTRAP_SERVERS",)),
        containers=tuple(args.container), config_map=getattr(args, "config_map", None),
        proxy_yaml=proxy_yaml, config_in_pod=config_in_pod,
    )


# Sections that name files from Secrets: those exist only in the pod, so Herald checks them
# when it starts there; the injector validates everything else.
_POD_FILES = (("upstream", "tls"), ("upstream", "sasl"), ("listen", "tls"), ("admin", "tls"),
              ("admin", "token"))


def _without_pod_files(data: Any) -> Any:
    if not isinstance(data, dict):
        return data
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for section, key in _POD_FILES:
        if isinstance(out.get(section), dict):
            out[section].pop(key, None)
    return out


def _own_config(path: Path, spec: SidecarSpec) -> tuple[SidecarSpec, str]:
    """A user's proxy.yaml, validated as the sidecar will load it; the ports and drain time
    the pod needs are taken from it."""
    try:
        data = read_yaml(path)
        text = path.read_text()  # carried into the ConfigMap as the user wrote it
    except (ConfigError, OSError) as exc:
        raise InjectError(str(exc)) from None
    try:
        config = parse_config(_without_pod_files(data), source=path, environ=_SIDECAR_ENV)
    except ConfigError as exc:
        raise InjectError("\n".join(f"{path}: {error}" for error in exc.errors)) from None
    admin = config.admin.bind
    if admin is None:
        raise InjectError(f"{path}: admin.bind: required: the kubelet probes /healthz and "
                          "/readyz there")
    if admin.host.startswith("127.") or admin.host in ("localhost", "::1"):
        raise InjectError(f"{path}: admin.bind: {admin} is loopback, where the kubelet's probes "
                          "cannot reach it (use 0.0.0.0)")
    return dataclasses.replace(
        spec, listen_port=config.listen.bootstrap.port,
        broker_port_base=config.listen.broker_port_base, admin_port=admin.port,
        shutdown_grace_s=config.shutdown_grace_s,
    ), text
