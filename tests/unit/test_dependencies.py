"""Dependencies run one way: protocol imports nothing of Herald's, interceptors only protocol,
the pipeline never proxy, the proxy never pipeline nor a built-in interceptor, neither product
the `herald` command, and inside `proxy/` each folder only its own and lower layers
(tests/support/import_rules.py). The checker is tested on a synthetic tree too, so a clean
run means the rules hold, not that the checker sees nothing."""

from __future__ import annotations

from pathlib import Path

from tests.support.import_rules import PROXY_LAYERS, imported_names, proxy_part, violations

ROOT = Path(__file__).resolve().parents[2]

def test_the_packages_import_only_what_their_layer_may() -> None:
    found = violations(ROOT)
    assert not found, "imports against the dependency rules:\n" + "\n".join(map(str, found))


def test_every_part_of_proxy_has_a_layer() -> None:
    """A new folder or top-level module must be placed in the order, not slip around it."""
    parts = {path.stem if path.is_file() else path.name
             for path in (ROOT / "proxy").iterdir()
             if (path.is_dir() and (path / "__init__.py").is_file())
             or (path.suffix == ".py" and path.name != "__init__.py")}
    layered = {part for layer in PROXY_LAYERS for part in layer}
    assert parts == layered


def test_the_checker_reads_the_real_tree() -> None:
    """Not vacuous: it finds the packages and their imports where it looks."""
    for package in ("protocol", "configuration", "interceptors", "pipeline", "proxy"):
        assert (ROOT / package / "__init__.py").is_file()
    server = {name for _, name in imported_names((ROOT / "proxy" / "server.py").read_text(),
                                                 "proxy.server")}
    services = ROOT / "proxy" / "filters" / "member_services.py"
    members = {name for _, name in imported_names(services.read_text(),
                                                  "proxy.filters.member_services")}
    assert "trio" in server and "interceptors" in members
    assert {proxy_part(name) for name in server} >= {"limits", "filters", "serving", "session"}


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in ("protocol", "configuration", "interceptors", "pipeline", "proxy"):
        (root / package).mkdir(exist_ok=True)
        (root / package / "__init__.py").touch()
    return root


def test_each_rule_catches_a_wrong_import(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "interceptors/bad.py": "from proxy.server import x\n",
        "configuration/bad.py": "from interceptors.api import Interceptor\n",
        "configuration/ok.py": "import yaml\n",
        "interceptors/settings.py": "from configuration import Node\n",
        "protocol/codec.py": "import struct\n\n\ndef f():\n    import interceptors.headers\n",
        "pipeline/job.py": "import importlib\n\nm = importlib.import_module('proxy.cli')\n",
        "proxy/filters/learner.py": "from interceptors import builtin\n",
        "proxy/ok.py": "from interceptors import Chains\nfrom interceptors.api import KEEP\n",
        "interceptors/ok.py": "import json\nfrom protocol.records import RecordBatch\n",
        "pipeline/ok.py": "from configuration import ConfigError\nimport pyspark\n",
    })
    found = [str(v) for v in violations(root)]
    assert found == [
        "configuration/bad.py:1: configuration imports nothing of Herald's (stdlib and "
        "third-party only) (imports interceptors.api)",
        "interceptors/bad.py:1: interceptors imports only protocol and configuration of Herald's "
        "(imports proxy.server)",
        "pipeline/job.py:3: pipeline never imports proxy (imports proxy.cli)",
        "protocol/codec.py:5: protocol imports nothing of Herald's (stdlib and third-party "
        "only) (imports interceptors.headers)",
        "proxy/filters/learner.py:1: proxy never imports a built-in interceptor "
        "(interceptors.builtin); it asks members through their declared interface "
        "(imports interceptors.builtin)",
    ]


def test_relative_imports_resolve_inside_their_own_package(tmp_path: Path) -> None:
    """A relative import never leaves its top-level package: ``from .. import proxy`` in
    interceptors is interceptors.proxy, not the proxy package."""
    assert list(imported_names("from ..chain import Chains\n", "interceptors.sub.b")) == [
        (1, "interceptors.chain"), (1, "interceptors.chain.Chains")]
    assert list(imported_names("from . import x\n", "interceptors.builtin", True)) == [
        (1, "interceptors.builtin"), (1, "interceptors.builtin.x")]
    root = _tree(tmp_path, {
        "interceptors/sub/b.py": "from .. import proxy\nfrom . import pipeline\n"
                                 "__import__('pipeline.x')\n",
    })
    assert [(v.path, v.line, v.name) for v in violations(root)] == [
        ("interceptors/sub/b.py", 3, "pipeline.x")]


def test_an_allowed_pair_lets_that_file_and_module_through_only(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "protocol/codegen/jars.py": "def f():\n    from proxy.devtools.kafka_dist import k\n",
        "protocol/other.py": "from proxy.devtools.kafka_dist import k\n",
    })
    allowed = frozenset({("protocol/codegen/jars.py", "proxy.devtools.kafka_dist")})
    assert [(v.path, v.line) for v in violations(root, allowed)] == [("protocol/other.py", 1)]
    assert [(v.path, v.line) for v in violations(root)] == [
        ("protocol/codegen/jars.py", 2), ("protocol/other.py", 1)]


def test_the_layer_order_catches_an_upward_import(tmp_path: Path) -> None:
    """Inside `proxy/`, a folder imports its own and lower layers: at module level, inside a
    function, or lazily by name, an import of a higher layer or of a sibling on its own layer
    is reported; an import under ``if TYPE_CHECKING:`` names a type only and is let through."""
    root = _tree(tmp_path, {
        "proxy/net/__init__.py": "",
        "proxy/net/transport.py": "import trio\nfrom proxy.net import sockio\n",
        "proxy/limits/budget.py": (
            "from typing import TYPE_CHECKING\n"
            "from proxy.net.transport import Transport\n"
            "from proxy.observability import metrics\n"
            "if TYPE_CHECKING:\n"
            "    from proxy.session.session import Session\n"
            "else:\n"
            "    from proxy.security import tls\n"
            "\n\ndef f():\n"
            "    from proxy.session import lanes\n"),
        "proxy/routing/rules.py": "import importlib\n"
                                  "importlib.import_module('proxy.native.relay')\n",
        "proxy/server.py": "from proxy.serving.listeners import serve\nfrom proxy import cli\n",
        "proxy/cli.py": "from proxy.server import run\nfrom .config import load\n",
    })
    found = [(v.path, v.line, v.name) for v in violations(root)]
    assert found == [
        ("proxy/limits/budget.py", 7, "proxy.security"),
        ("proxy/limits/budget.py", 11, "proxy.session"),
        ("proxy/routing/rules.py", 2, "proxy.native.relay"),
        ("proxy/server.py", 2, "proxy.cli"),
    ]
    texts = {str(v) for v in violations(root)}
    assert ("proxy/limits/budget.py:11: proxy.limits (layer 3) imports only its own folder "
            "and lower layers; proxy.session is a higher layer (7) (imports proxy.session)"
            in texts)
    assert ("proxy/routing/rules.py:2: proxy.routing (layer 6) imports only its own folder "
            "and lower layers; proxy.native is its own layer (6) (imports proxy.native.relay)"
            in texts)


def test_a_part_of_proxy_outside_the_order_is_reported(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "proxy/extras/x.py": "from proxy.net import wire\n",
        "proxy/session/s.py": "from proxy.extras import x\n",
    })
    assert [str(v) for v in violations(root)] == [
        "proxy/extras/x.py:1: proxy.extras is in no layer of PROXY_LAYERS (imports proxy.net)",
        "proxy/session/s.py:1: proxy.extras is in no layer of PROXY_LAYERS (imports proxy.extras)",
    ]


def test_the_rules_hold_without_a_herald_package(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"proxy/cli.py": "from proxy.server import run\n",
                            "proxy/server.py": "from proxy.net import wire\n"})
    assert not (root / "herald").exists()
    assert violations(root) == []


def test_the_products_import_neither_each_other_nor_the_command(tmp_path: Path) -> None:
    """`herald` (the command) knows the proxy and the pipeline; they know neither it nor each
    other, even through a lazy import inside a function."""
    root = _tree(tmp_path, {
        "proxy/cli.py": "def main():\n    from pipeline.cli import main\n",
        "proxy/check.py": "import herald.registry\n",
        "pipeline/cli.py": "import importlib\n\nm = importlib.import_module('herald.cli')\n",
        "interceptors/x.py": "from herald import cli\n",
        "herald/cli.py": "import proxy.cli\nimport pipeline.cli\n",
    })
    assert [(v.path, v.line, v.name) for v in violations(root)] == [
        ("interceptors/x.py", 1, "herald"), ("pipeline/cli.py", 3, "herald.cli"),
        ("proxy/check.py", 1, "herald.registry"), ("proxy/cli.py", 2, "pipeline.cli")]
