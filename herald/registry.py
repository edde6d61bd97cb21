"""What the `herald` command is made of: its subcommands, and which package reads which part of
the YAML file, each named as a `module:function` string and imported only when it is used.

This is the one place that knows every product. `proxy` and `pipeline` never import each
other, nor this package: they provide the functions named here, as an installed package's
entry points would, and `herald run` therefore loads the proxy and never Spark, while `herald
pipeline` loads the pipeline and never the proxy.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Command:
    """A `herald` subcommand.

    `arguments(parser)` adds the command's arguments to an `argparse.ArgumentParser` of its
    own; without it, everything after the command's name is handed to `run` as an argv list
    (the command parses it itself). With `section`, the command's `--config` file is read
    and every section of it checked first (one error per line, exit status 1), and
    `run(args, value)` gets that section's value; otherwise `run(args)`.
    """

    name: str
    help: str
    run: str
    arguments: str | None = None
    section: str | None = None


@dataclass(frozen=True)
class Section:
    """A part of the YAML file and the function that reads it.

    With a `key`, `read(value, key)` gets the value of that top-level key (its YAML path) when
    the file has one. Without, `read(document, file)` gets the document with every key that
    another section claims taken out: the proxy's own sections, checked together (routing
    names the clusters, an unknown key is refused). Either returns the parsed value or raises
    `ConfigError` listing every error, each starting with its YAML path.
    """

    name: str
    read: str
    key: str | None = None


SECTIONS = (
    Section("proxy", "proxy.config.proxy_yaml:parse_config"),
    Section("pipeline", "pipeline.config:parse_pipeline_config", key="pipeline"),
)

COMMANDS = (
    Command("run", "run the proxy in front of the cluster named in the config",
            run="proxy.cli:run", arguments="proxy.cli:run_arguments", section="proxy"),
    Command("dev", "start a local Kafka broker and the proxy in front of it",
            run="proxy.cli:dev", arguments="proxy.cli:dev_arguments", section="proxy"),
    Command("check", "validate a config file as run would, without serving",
            run="herald.check:check", arguments="herald.check:arguments"),
    Command("k8s", "Kubernetes: add the Herald sidecar to manifests, or serve the webhook that "
                   "adds it to pods",
            run="proxy.k8s.command:run", arguments="proxy.k8s.command:add_arguments"),
    Command("pipeline", "the analytics pipeline on Spark (herald pipeline --help)",
            run="pipeline.cli:main"),
)


class NotInstalled(ImportError):
    """The package that provides a command or section is not installed here (the proxy's
    container image has no `pipeline`)."""


def resolve(ref: str) -> Callable[..., Any]:
    """The function `module:function` names, its module imported now."""
    module, _, name = ref.partition(":")
    try:
        function: Callable[..., Any] = getattr(importlib.import_module(module), name)
        return function
    except ModuleNotFoundError as exc:
        if exc.name is None or not _is_parent_or_self(exc.name, module):
            raise  # the provider is there but something it imports is not: a real error
        raise NotInstalled(f"{module} is not installed") from exc


def _is_parent_or_self(name: str, module: str) -> bool:
    return module == name or module.startswith(name + ".")
