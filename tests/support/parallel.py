"""How the suite runs on several pytest-xdist workers at once (scripts/test.sh).

Each worker is a test session of its own: it starts its own session broker, and a module's
fixtures live in the worker that runs the module. So the scheduler is handed whole modules,
never single tests, and modules that share something heavier than a module fixture go
together:

- `pipeline`: one SparkSession and one played topology serve every pipeline test;
- `cluster`: the three-broker cluster (`kafka_cluster`, `herald_cluster`), a session
  fixture, serves every module that names it.

The heaviest groups are scheduled first, so that no worker starts one near the end while the
others wait. Each worker picks ports from a slice of its own (`HERALD_PORT_SHARE`,
proxy/devtools/embedded_kafka.py), so two workers never choose the same port at once.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any

import pytest

from proxy.devtools.embedded_kafka import PORT_SHARE_ENV

REPO = Path(__file__).resolve().parents[2]
PIPELINE, CLUSTER = "pipeline", "cluster"
FIRST = (PIPELINE, CLUSTER)  # longest first
_CLUSTER_FIXTURE = re.compile(r"\b(?:kafka_cluster|herald_cluster)\b")


def claim_port_share(environ: dict[str, str] = os.environ) -> str | None:  # noqa: B006
    """In an xdist worker (`PYTEST_XDIST_WORKER=gw<i>` of `PYTEST_XDIST_WORKER_COUNT`), set
    `HERALD_PORT_SHARE` to its slice (inherited by the brokers and Heralds it starts); the
    share set, or None outside a parallel run."""
    worker, count = environ.get("PYTEST_XDIST_WORKER"), environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not worker or not count or not worker.startswith("gw"):
        return None
    share = f"{int(worker[2:])}/{int(count)}"
    environ[PORT_SHARE_ENV] = share
    return share


@functools.cache
def group_of(module: str) -> str:
    """A module's scheduling group (`module`: its path from the repository, `tests/...py`):
    a shared one when it needs what the group shares, else the module itself. Told from the
    module's path and text alone, so the controller, which sees test ids only, and every
    worker agree."""
    if module.startswith("tests/pipeline/"):
        return PIPELINE
    path = REPO / module
    if path.is_file() and _CLUSTER_FIXTURE.search(path.read_text()):
        return CLUSTER
    return module


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def schedule(items: list[pytest.Item]) -> None:
    """Move the heaviest groups to the front, keeping the order within each; run in every
    worker alike, so each collects the same list."""
    rank = {name: at for at, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(group_of(_module(item.nodeid)), len(FIRST)))


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scheduling by scope, with a module's group as its scope: a worker is handed
    a whole group at a time, in the order the workers collected."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(_module(nodeid))

    return GroupScheduling(config, log)
