"""How the suite runs on several pytest-xdist workers at once (scripts/test.sh).

Each worker is a test session of its own: it starts its own session broker, and a module's
fixtures live in the worker that runs the module. So the scheduler is handed whole modules
(`--dist loadgroup`, one group per module), never single tests, and modules that share
something heavier than a module fixture go together:

- `pipeline`: one SparkSession and one played topology serve every pipeline test;
- `cluster`: the three-broker cluster (`kafka_cluster`), a session fixture;
- `pod-network`: the simulated pod's network namespace uses fixed addresses.

The heaviest groups are scheduled first, so that no worker starts one near the end while the
others wait. Each worker picks ports from a slice of its own (`HERALD_PORT_SHARE`,
proxy/devtools/embedded_kafka.py), so two workers never choose the same port at once.
"""

from __future__ import annotations

import os

import pytest

from proxy.devtools.embedded_kafka import PORT_SHARE_ENV

PIPELINE, CLUSTER, POD_NETWORK = "pipeline", "cluster", "pod-network"
FIRST = (PIPELINE, CLUSTER)  # longest first
_CLUSTER_FIXTURES = {"kafka_cluster", "herald_cluster"}
_POD_NETWORK_MODULES = {"tests/k8s/deploy/test_image.py",
                        "tests/k8s/proxy/k8s/test_simulated_pod.py"}


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


def module_of(item: pytest.Item) -> str:
    """The test's module, as a path relative to the repository (`tests/...py`)."""
    return item.nodeid.split("::", 1)[0]


def group_modules(items: list[pytest.Item]) -> dict[str, str]:
    """Each module's scheduling group: a shared one (`pipeline`, `cluster`, `pod-network`)
    when the module needs what the group shares, else the module itself."""
    groups: dict[str, str] = {}
    for item in items:
        module = module_of(item)
        if module.startswith("tests/pipeline/"):
            groups[module] = PIPELINE
        elif module in _POD_NETWORK_MODULES:
            groups[module] = POD_NETWORK
        elif _CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())):
            groups[module] = CLUSTER  # the whole module, also its tests before this one
        else:
            groups.setdefault(module, module)
    return groups


def schedule(items: list[pytest.Item]) -> None:
    """Mark every test with its module's group (`xdist_group`) and move the heaviest groups
    to the front, keeping the order within each; run in every worker alike, so each collects
    the same list."""
    groups = group_modules(items)
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups[module_of(item)]))
    rank = {name: at for at, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(groups[module_of(item)], len(FIRST)))
