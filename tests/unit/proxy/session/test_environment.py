"""The session environment: one frozen value the proxy builds from its own parts, which a
config reload leaves in place while the chain it holds takes the new interceptors."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import yaml

from proxy.config.proxy_yaml import load_config
from proxy.limits.session_limits import SessionLimits
from proxy.server import Proxy

DOC = {
    "upstream": {"bootstrap": "127.0.0.1:9092"},
    "listen": {"bootstrap": "127.0.0.1:19092", "broker_port_base": 19100},
    "limits": {"max_frame_bytes": 65536, "max_in_flight": 7, "idle_timeout_s": 30,
               "frame_timeout_s": 5},
    "interceptors": {"produce": [{"type": "insert_header", "header": "app", "value": "x"}]},
}


def test_the_proxy_builds_one_environment_from_its_own_parts(tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text(yaml.safe_dump(DOC))
    proxy = Proxy(load_config(path))
    env = proxy.environment
    assert env.chain is proxy.chain and env.metrics is proxy.metrics
    assert env.memory is proxy.memory and env.guard is proxy.guard
    assert env.cluster is proxy.cluster and env.directory is proxy.directory
    assert env.native is proxy.native
    assert env.limits == SessionLimits(65536, 7, 30.0, 5.0)
    assert proxy.interceptors.memory is proxy.memory  # given when built, not set afterwards
    with pytest.raises(dataclasses.FrozenInstanceError):
        env.chain = proxy.chain  # type: ignore[misc]

    before = proxy.interceptors.chains
    changed = dict(DOC, interceptors={"produce": [
        {"type": "insert_header", "header": "app", "value": "y"}]})
    path.write_text(yaml.safe_dump(changed))
    assert proxy.reload()
    assert proxy.environment is env and env.chain is proxy.chain
    assert proxy.interceptors.chains is not before  # the chain's member took the new chains


def test_deadlines_are_kept_only_when_the_limits_set_them() -> None:
    assert SessionLimits(1024, 1).watches_deadlines is False
    assert SessionLimits(1024, 1, idle_timeout_s=30.0).watches_deadlines is True
    assert SessionLimits(1024, 1, frame_timeout_s=5.0).watches_deadlines is True
    assert SessionLimits(1024, 1, math.inf, math.inf).watches_deadlines is False
