"""The rules of which Herald package may import which, and a checker that reads the source.

Dependencies run one way (DESIGN.md, *Layout*): `protocol` is the codec and imports nothing of
Herald's; `interceptors` is pure header code over `protocol`; the pipeline runs where Spark
runs and never imports `proxy`, nor the proxy `pipeline` (the `herald` command above both
finds each through `herald.registry`, and neither imports it); and the proxy reaches members
through their declared interface (`interceptors.api`), never by naming a built-in
(`interceptors.builtin`), so a plugin can do whatever a built-in does. The checker reads
every import with `ast`: module level or inside a function, `from x import y` (and `y` as a
submodule of `x`), relative imports resolved, and `importlib.import_module("x")` /
`__import__("x")` with a string literal, so a lazy import cannot slip past.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

HERALD = frozenset({"protocol", "interceptors", "proxy", "pipeline", "herald", "tests", "bench",
                    "fuzz"})
"""Herald's own top-level packages: anything else is the standard library or third-party."""

CHECKED = ("protocol", "interceptors", "pipeline", "proxy")
"""The shipped packages whose imports the rules govern."""


@dataclass(frozen=True)
class Rule:
    """What a package may not import: `forbids(name)` says whether the dotted name imported
    breaks the rule, `text` is how a violation is reported."""

    package: str
    text: str
    forbids: Callable[[str], bool]


def _top(name: str) -> str:
    return name.partition(".")[0]


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


RULES = (
    Rule("protocol", "protocol imports nothing of Herald's (stdlib and third-party only)",
         lambda name: _top(name) in HERALD and _top(name) != "protocol"),
    Rule("interceptors", "interceptors imports only protocol of Herald's",
         lambda name: _top(name) in HERALD - {"interceptors", "protocol"}),
    Rule("pipeline", "pipeline never imports proxy",
         lambda name: _top(name) == "proxy"),
    Rule("pipeline", "pipeline never imports the herald command above it",
         lambda name: _top(name) == "herald"),
    Rule("proxy", "proxy never imports pipeline nor the herald command above them (the "
         "command finds both through herald.registry)",
         lambda name: _top(name) in ("pipeline", "herald")),
    Rule("proxy", "proxy never imports a built-in interceptor (interceptors.builtin); it asks "
         "members through their declared interface",
         lambda name: _under(name, "interceptors.builtin")),
)


@dataclass(frozen=True)
class Violation:
    path: str  # relative to the tree's root, with forward slashes
    line: int
    name: str  # the dotted name imported
    rule: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule} (imports {self.name})"


def _module_of(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str | None, level: int, here: str, is_package: bool) -> str:
    """The absolute name of a (possibly relative) ``from`` import in module `here`."""
    if level == 0:
        return module or ""
    base = here.split(".")
    if not is_package:
        base.pop()
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, module] if module else base)


def imported_names(source: str, here: str = "", is_package: bool = False
                   ) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of every import in `source`, wherever it is in the file. ``from
    x import y`` gives both ``x`` and ``x.y`` (``y`` may be a submodule)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(node.module, node.level, here, is_package)
            yield node.lineno, module
            for alias in node.names:
                if alias.name != "*":
                    yield node.lineno, f"{module}.{alias.name}"
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func):
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield node.lineno, first.value


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in ("__import__", "import_module")
    return (isinstance(func, ast.Attribute) and func.attr == "import_module"
            and isinstance(func.value, ast.Name) and func.value.id == "importlib")


def violations(root: Path, allowed: frozenset[tuple[str, str]] = frozenset()
               ) -> list[Violation]:
    """Every import under `root` that breaks a rule, in file and line order: one per line
    (the first name it imports that breaks the rule). `allowed` holds (path, module) pairs
    that are let through: that file may import that module and what is below it."""
    found: list[Violation] = []
    for rule in RULES:
        package = root / rule.package
        if not package.is_dir():
            continue
        for path in sorted(package.rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            excused = [module for where, module in allowed if where == rel]
            reported: set[int] = set()
            for line, name in imported_names(path.read_text(), _module_of(path, root),
                                             path.name == "__init__.py"):
                if (line in reported or not rule.forbids(name)
                        or any(_under(name, module) for module in excused)):
                    continue
                reported.add(line)
                found.append(Violation(rel, line, name, rule.text))
    return sorted(found, key=lambda v: (v.path, v.line))
