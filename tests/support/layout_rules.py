"""The layout of tests/ and a checker that reads it.

Tests mirror the code: a test module lives in `tests/<tier>/<path>/`, where `<path>` is the
source folder it mainly tests (`tests/unit/proxy/session/` for `proxy/session/`, the tier's own
folder for what spans the tree), so a reader finds the tests of a folder in one predictable
place per tier. What several modules share lives in `tests/support/` (helpers, rigs) or in a
`conftest.py` at the level that covers its users (fixtures), never in a test module another
imports: a test module is read on its own, and changing one cannot break another. Every
folder is a package (`__init__.py`), so two tiers may hold modules of the same name.

The checker reads imports with `ast`, at module level or inside a function, relative ones
resolved, and `importlib.import_module("x")` with a string literal.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SHARED = "tests.support"
"""The one package under tests/ that other test code may import."""


@dataclass(frozen=True)
class Problem:
    path: str  # relative to the tree's root, with forward slashes
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text}" if self.line else f"{self.path}: {self.text}"


def _module(root: Path, path: Path) -> tuple[str, bool]:
    """The dotted name of a file under `root`, and whether it is a package's __init__."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    package = parts[-1] == "__init__"
    if package:
        parts.pop()
    return ".".join(parts), package


def imported(source: str, module: str, package: bool) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of every import in `source`; `from x import y` gives x and x.y (y
    may be a submodule)."""
    base = module.split(".") if package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[:len(base) - node.level + 1]
                name = ".".join(anchor + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            yield node.lineno, name
            for alias in node.names:
                yield node.lineno, f"{name}.{alias.name}"
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and ast.unparse(node.func) in ("importlib.import_module", "import_module",
                                             "__import__")):
            yield node.lineno, node.args[0].value


def _is_test_code(name: str) -> bool:
    """Whether `name` is a module of tests/ other than the shared support."""
    if name != "tests" and not name.startswith("tests."):
        return False
    return not (name == SHARED or name.startswith(SHARED + "."))


def cross_imports(root: Path) -> list[Problem]:
    """Imports of test modules (or conftest files) by any module of tests/ but the support,
    one per import line."""
    found = []
    for path in sorted((root / "tests").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("tests/support/"):
            continue
        module, package = _module(root, path)
        lines = set()
        for line, name in imported(path.read_text(), module, package):
            # `from tests import support` passes through the package `tests` itself
            if name != "tests" and _is_test_code(name) and line not in lines:
                lines.add(line)
                found.append(Problem(rel, line, f"imports the test code {name}: shared code "
                                                "goes to tests/support/, shared fixtures to a "
                                                "conftest.py"))
    return found


def tiers(root: Path) -> list[Path]:
    """The folders directly under tests/ that hold tests (every one but the support)."""
    return sorted(p for p in (root / "tests").iterdir()
                  if p.is_dir() and p.name not in ("support", "__pycache__"))


TREE_WIDE = frozenset({"tests/unit/test_dependencies.py", "tests/unit/test_tests_layout.py",
                       "tests/unit/test_strict_switch.py", "tests/unit/test_parallel_groups.py",
                       "tests/unit/test_port_blocks.py"})
"""Tests of the whole tree (its shape, how a run treats missing native parts, how it is split
across workers, how its processes share ports): the only modules at the top of a tier, named
after no source package."""


def source_folder(root: Path, tier: Path, folder: Path) -> Path:
    """The source folder tests/<tier>/<folder>/ mirrors: <folder> itself, or inside the package
    a tier is named after (tests/pipeline/ holds the pipeline's own tests)."""
    if (root / tier.name / "__init__.py").is_file():
        return root / tier.name / folder
    return root / folder


def unmirrored(root: Path) -> list[Problem]:
    """Test modules whose folder inside their tier names no folder of the source tree, or that
    sit at the top of a tier without testing the whole tree."""
    found = []
    for tier in tiers(root):
        for path in sorted(tier.rglob("test_*.py")):
            rel = path.relative_to(root).as_posix()
            folder = path.parent.relative_to(tier)
            source = source_folder(root, tier, folder)
            if not source.is_dir():
                found.append(Problem(rel, 0, f"its folder mirrors no source folder "
                                             f"({source.relative_to(root).as_posix()}/)"))
            elif source == root and rel not in TREE_WIDE:
                found.append(Problem(rel, 0, "it sits at the top of its tier: it belongs under "
                                             "the source folder it tests"))
    return found


def loose(root: Path) -> list[Problem]:
    """Test modules outside a tier, or in a folder that is not a package."""
    tests = root / "tests"
    found = []
    for path in sorted(tests.rglob("test_*.py")):
        rel = path.relative_to(root).as_posix()
        if path.parent == tests or rel.startswith("tests/support/"):
            found.append(Problem(rel, 0, "a test module belongs in a tier's folder"))
            continue
        for folder in path.relative_to(tests).parents:
            if not (tests / folder / "__init__.py").is_file():
                found.append(Problem(rel, 0, f"tests/{folder.as_posix()}/ has no __init__.py"))
                break
    return found
