"""Dependencies run one way: protocol imports nothing of Herald's, interceptors only protocol,
the pipeline never proxy, and the proxy never a built-in interceptor (tests/support/
import_rules.py). The checker is tested on a synthetic tree too, so a clean run means the
rules hold, not that the checker sees nothing."""

from __future__ import annotations

from pathlib import Path

from tests.support.import_rules import imported_names, violations

ROOT = Path(__file__).resolve().parents[2]

def test_the_packages_import_only_what_their_layer_may() -> None:
    found = violations(ROOT)
    assert not found, "imports against the dependency rules:\n" + "\n".join(map(str, found))


def test_the_checker_reads_the_real_tree() -> None:
    """Not vacuous: it finds the packages and their imports where it looks."""
    for package in ("protocol", "interceptors", "pipeline", "proxy"):
        assert (ROOT / package / "__init__.py").is_file()
    server = {name for _, name in imported_names((ROOT / "proxy" / "server.py").read_text(),
                                                 "proxy.server")}
    services = ROOT / "proxy" / "filters" / "member_services.py"
    members = {name for _, name in imported_names(services.read_text(),
                                                  "proxy.filters.member_services")}
    assert "trio" in server and "interceptors" in members


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in ("protocol", "interceptors", "pipeline", "proxy"):
        (root / package).mkdir(exist_ok=True)
        (root / package / "__init__.py").touch()
    return root


def test_each_rule_catches_a_wrong_import(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "interceptors/bad.py": "from proxy.server import x\n",
        "protocol/codec.py": "import struct\n\n\ndef f():\n    import interceptors.headers\n",
        "pipeline/job.py": "import importlib\n\nm = importlib.import_module('proxy.cli')\n",
        "proxy/filters/learner.py": "from interceptors import builtin\n",
        "proxy/ok.py": "from interceptors import Chains\nfrom interceptors.api import KEEP\n",
        "interceptors/ok.py": "import json\nfrom protocol.records import RecordBatch\n",
        "pipeline/ok.py": "from interceptors.config import ConfigError\nimport pyspark\n",
    })
    found = [str(v) for v in violations(root)]
    assert found == [
        "interceptors/bad.py:1: interceptors imports only protocol of Herald's "
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
    assert list(imported_names("from ..config import Node\n", "interceptors.sub.b")) == [
        (1, "interceptors.config"), (1, "interceptors.config.Node")]
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
