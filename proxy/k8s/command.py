"""`herald k8s inject`: the command line of the injector."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from proxy.k8s import sidecar
from proxy.k8s.inject import InjectError, inject
from proxy.k8s.sidecar_options import add_sidecar_arguments, options_from
from proxy.k8s.webhook_command import add_webhook_parser, run_webhook

INJECT_HELP = f"""\
Read Kubernetes manifests (multi-document YAML, from files or stdin) and write them to stdout
with the Herald sidecar added to every workload (Deployment, StatefulSet, DaemonSet, ReplicaSet,
Job, CronJob, Pod): by default a native sidecar (an init container with restartPolicy: Always,
Kubernetes 1.29+), its ConfigMap (<workload>-herald), probes on /healthz and /readyz, the pod's
name, namespace and node for the audit headers, and resource requests sized from the expected
throughput. The application's bootstrap variable is set to Herald's loopback listener: in every
container that has it, or in those named with --container (added where missing); a pod's only
container gets it in any case.

Injecting twice changes nothing: pods marked {sidecar.INJECTED} are left as they are.
"""


def add_arguments(k8s: argparse.ArgumentParser) -> None:
    """The arguments of `herald k8s` (its own subcommands) on the command's parser."""
    k8s_sub = k8s.add_subparsers(dest="k8s_command", required=True, metavar="K8S_COMMAND")
    p = k8s_sub.add_parser("inject", help="add the Herald sidecar to workload manifests",
                           description=INJECT_HELP,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="*", type=Path, default=[],
                   help="manifest files ('-' or none: stdin)")
    add_sidecar_arguments(p)
    p.add_argument("--config-map", metavar="NAME",
                   help="use this existing ConfigMap for proxy.yaml; write none")
    p.add_argument("--config-in-pod", action="store_true",
                   help=f"put proxy.yaml in the pod's {sidecar.CONFIG_ANNOTATION} annotation, "
                        "mounted through the downward API, and write no ConfigMap (what the "
                        "admission webhook does)")
    p.add_argument("--output", "-o", type=Path, help="write here instead of stdout")
    add_webhook_parser(k8s_sub)


def _read(files: list[Path]) -> list[Any]:
    docs: list[Any] = []
    for path in files or [Path("-")]:
        name = "stdin" if str(path) == "-" else str(path)
        try:
            text = sys.stdin.read() if str(path) == "-" else path.read_text()
        except OSError as exc:
            raise InjectError(f"{name}: cannot read ({exc.strerror})") from exc
        try:
            docs.extend(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            raise InjectError(f"{name}: not valid YAML: {exc}") from exc
    return docs


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the embedded proxy.yaml) as readable block scalars."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_documents(docs: list[Any]) -> str:
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, explicit_start=True)


def run(args: argparse.Namespace) -> int:
    if args.k8s_command == "webhook":
        return run_webhook(args)
    try:
        if args.config_in_pod and args.config_map:
            raise InjectError("--config-in-pod and --config-map: choose one (where proxy.yaml "
                              "comes from)")
        options = options_from(args, config_in_pod=args.config_in_pod)
        docs, report = inject(_read(args.files), options)
    except InjectError as exc:
        for line in str(exc).splitlines():
            print(f"herald k8s inject: {line}", file=sys.stderr)
        return 2
    text = dump_documents(docs)
    if args.output is not None:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    for name in report.injected:
        print(f"herald k8s inject: {name}: sidecar added", file=sys.stderr)
    for name in report.unchanged:
        print(f"herald k8s inject: {name}: already injected, unchanged", file=sys.stderr)
    variables = ", ".join(options.bootstrap_env)
    for name in report.unpointed:
        print(f"herald k8s inject: {name}: no container has {variables}, so none was pointed "
              "at Herald (name the application's with --container)", file=sys.stderr)
    return 0
