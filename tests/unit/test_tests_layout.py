"""Tests mirror the code and share through tests/support/ and conftest.py only (tests/support/
layout_rules.py). The checker is tested on a synthetic tree too, so a clean run means the rules
hold, not that the checker sees nothing."""

from __future__ import annotations

from pathlib import Path

from tests.support.layout_rules import cross_imports, loose, tiers, unmirrored

ROOT = Path(__file__).resolve().parents[2]


def test_no_test_module_imports_another() -> None:
    found = cross_imports(ROOT)
    assert not found, "test code imported by test code:\n" + "\n".join(map(str, found))


def test_each_test_module_sits_under_the_source_folder_it_tests() -> None:
    found = unmirrored(ROOT) + loose(ROOT)
    assert not found, "test modules out of place:\n" + "\n".join(map(str, found))


def test_the_checker_reads_the_real_tree() -> None:
    """Not vacuous: it finds the tiers, and test modules deep inside them."""
    names = {t.name for t in tiers(ROOT)}
    assert {"unit", "integration", "pipeline"} <= names
    assert (ROOT / "tests/unit/proxy/native/test_path_choice.py").is_file()
    assert (ROOT / "tests/integration/proxy/native/test_native_relay.py").is_file()


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_each_rule_catches_a_misplaced_or_borrowing_test(tmp_path: Path) -> None:
    inits = {f"tests/{p}__init__.py": "" for p in (
        "", "support/", "unit/", "unit/proxy/", "unit/proxy/session/", "unit/proxy/nowhere/",
        "integration/")}
    root = _tree(tmp_path, {
        **inits,
        "proxy/session/lanes.py": "",
        "tests/support/rig.py": "from tests.unit.proxy.session import test_lanes\n",
        "tests/unit/proxy/session/test_lanes.py": (
            "from tests.support.rig import Rig\nfrom tests.support import rig\n"
            "from tests.support.native import stamp as stamp_tests\n"),
        "tests/unit/proxy/session/test_pumps.py": (
            "from tests.unit.proxy.session.test_lanes import helper\n"
            "from . import test_lanes\n\n\n"
            "def test_x():\n    from tests.integration import test_y\n"),
        "tests/unit/proxy/session/conftest.py": "from tests.conftest import kafka_version\n",
        "tests/unit/proxy/nowhere/test_z.py": "import importlib\n\n"
                                              "importlib.import_module('tests.unit.x')\n",
        "tests/integration/test_top.py": "",
        "tests/unit/test_dependencies.py": "",
        "pipeline/__init__.py": "",
        "tests/pipeline/__init__.py": "",
        "tests/pipeline/test_job.py": "",
        "tests/pipeline/proxy/__init__.py": "",
        "tests/pipeline/proxy/test_wrong.py": "",
        "tests/integration/proxy/test_deep.py": "",
        "tests/test_stray.py": "",
    })
    assert [str(p) for p in cross_imports(root)] == [
        "tests/unit/proxy/nowhere/test_z.py:3: imports the test code tests.unit.x: shared code "
        "goes to tests/support/, shared fixtures to a conftest.py",
        "tests/unit/proxy/session/conftest.py:1: imports the test code tests.conftest: shared "
        "code goes to tests/support/, shared fixtures to a conftest.py",
        "tests/unit/proxy/session/test_pumps.py:1: imports the test code "
        "tests.unit.proxy.session.test_lanes: shared code goes to tests/support/, shared "
        "fixtures to a conftest.py",
        "tests/unit/proxy/session/test_pumps.py:2: imports the test code "
        "tests.unit.proxy.session: shared code goes to tests/support/, shared fixtures to a "
        "conftest.py",
        "tests/unit/proxy/session/test_pumps.py:6: imports the test code tests.integration: "
        "shared code goes to tests/support/, shared fixtures to a conftest.py",
    ]
    assert [str(p) for p in unmirrored(root)] == [
        "tests/integration/test_top.py: it sits at the top of its tier: it belongs under the "
        "source folder it tests",
        "tests/pipeline/proxy/test_wrong.py: its folder mirrors no source folder "
        "(pipeline/proxy/)",
        "tests/unit/proxy/nowhere/test_z.py: its folder mirrors no source folder "
        "(proxy/nowhere/)",
    ]
    assert [str(p) for p in loose(root)] == [
        "tests/integration/proxy/test_deep.py: tests/integration/proxy/ has no __init__.py",
        "tests/test_stray.py: a test module belongs in a tier's folder",
    ]
