"""How the suite runs on several pytest-xdist workers at once (scripts/test.sh).

Each worker is a test session of its own: it starts its own session broker, and a module's
fixtures live in the worker that runs the module. So the scheduler is handed whole modules,
never single tests, and modules that share something heavier than a module fixture go
together:

- `pipeline`: the modules that read the one played topology (`played`, `batch_run`: Herald,
  four services and a batch run, set up once); a module that only needs Herald
  (`herald_traced`, a process started in seconds) is scheduled on its own;
- `cluster`: the three-broker cluster (`kafka_cluster`, `herald_cluster`), a session
  fixture, serves every module that names it.

The heaviest groups are scheduled first, so that no worker starts one near the end while the
others wait, and the modules that need a build scripts/test.sh runs beside the suite (the
image, the API server, Jaeger, Spark's class archive) last, so the build has had the suite's
time. Each worker picks ports from a slice of its own (`HERALD_PORT_SHARE`,
proxy/devtools/embedded_kafka.py), and the one job beside them that starts brokers (the class
archive's trainer) from another, so no two of them choose the same port at once.
"""

from __future__ import annotations

import ast
import functools
import os
from pathlib import Path
from typing import Any

import pytest

from proxy.devtools.embedded_kafka import PORT_SHARE_ENV

REPO = Path(__file__).resolve().parents[2]
PIPELINE, CLUSTER = "pipeline", "cluster"
# Longest first, as measured on a 2-core machine (pytest --durations, three workers): the
# played topology's modules about 15 minutes, the stream's modules 7 to 8 each, then the
# compatibility matrix and the cluster's modules, then the slowest of the rest.
FIRST = (PIPELINE, "tests/pipeline/test_stream_state.py",
         "tests/pipeline/test_cluster_stream.py", "tests/pipeline/test_stream.py",
         "tests/integration/proxy/test_compatibility.py", CLUSTER,
         "tests/integration/proxy/routing/test_routing.py",
         "tests/integration/proxy/security/test_security.py", "tests/pipeline/test_graph.py",
         "tests/pipeline/test_demo.py")
LAST = ("tests/integration/proxy/observability/test_jaeger.py", "tests/k8s/deploy/test_image.py",
        "tests/k8s/proxy/k8s/test_webhook_apiserver.py", "tests/pipeline/test_session.py")
_PLAYED_FIXTURES = frozenset({"played", "batch_run"})
_CLUSTER_FIXTURES = frozenset({"kafka_cluster", "herald_cluster"})


def claim_port_share(environ: dict[str, str] = os.environ) -> str | None:  # noqa: B006
    """In an xdist worker (`PYTEST_XDIST_WORKER=gw<i>` of `PYTEST_XDIST_WORKER_COUNT` = n),
    set `HERALD_PORT_SHARE` to its slice, i/(n+1) (inherited by the brokers and Heralds it
    starts); the share set, or None outside a parallel run."""
    worker, count = environ.get("PYTEST_XDIST_WORKER"), environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not worker or not count or not worker.startswith("gw"):
        return None
    # One slice more than workers: the last is the one scripts/test.sh gives the job it runs
    # beside them that starts brokers too (Spark's class archive's trainer).
    share = f"{int(worker[2:])}/{int(count) + 1}"
    environ[PORT_SHARE_ENV] = share
    return share


def _parameters(text: str) -> set[str]:
    """The parameter names of every function of a module: the fixtures its tests and its own
    fixtures ask for (a word in a docstring or a comment asks for nothing)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:  # collection reports it; scheduled on its own meanwhile
        return set()
    return {a.arg for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]}


@functools.cache
def group_of(module: str) -> str:
    """A module's scheduling group (`module`: its path from the repository, `tests/...py`):
    a shared one when it needs what the group shares, else the module itself. Told from the
    module's path and text alone, so the controller, which sees test ids only, and every
    worker agree."""
    path = REPO / module
    wants = _parameters(path.read_text()) if path.is_file() else set()
    if module.startswith("tests/pipeline/") and wants & _PLAYED_FIXTURES:
        return PIPELINE
    if wants & _CLUSTER_FIXTURES:
        return CLUSTER
    return module


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def schedule(items: list[pytest.Item]) -> None:
    """Move the heaviest groups to the front and the modules that wait for a build to the
    back, keeping the order within each; run in every worker alike, so each collects the
    same list."""
    rank = {name: at for at, name in enumerate(FIRST)}
    rank.update({name: len(FIRST) + 1 + at for at, name in enumerate(LAST)})
    items.sort(key=lambda item: rank.get(group_of(_module(item.nodeid)), len(FIRST)))


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scheduling by scope, with a module's group as its scope: a worker is handed
    a whole group at a time, in the order the workers collected."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(_module(nodeid))

    return GroupScheduling(config, log)
