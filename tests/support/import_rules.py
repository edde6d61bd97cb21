"""The rules of which Herald package may import which, and a checker that reads the source.

Dependencies run one way (DESIGN.md, *Layout*): `protocol` is the codec and imports nothing of
Herald's, nor does `configuration`, the YAML layer every package reads its settings through;
`interceptors` is pure header code over those two; the pipeline runs where Spark
runs and never imports `proxy`, nor the proxy `pipeline` (the `herald` command above both
finds each through `herald.registry`, and neither imports it); and the proxy reaches members
through their declared interface (`interceptors.api`), never by naming a built-in
(`interceptors.builtin`), so a plugin can do whatever a built-in does.

Inside `proxy/` the folders are ordered in layers (`PROXY_LAYERS`, docs/architecture.md): a
folder, or a top-level module such as `server.py`, imports its own folder and lower layers
only, never a sibling of its own layer nor anything above, so that a low concern (socket I/O,
the memory budget) never reaches for a high one (a session, a listener).

The checker reads every import with `ast`: module level or inside a function, `from x import
y` (and `y` as a submodule of `x`), relative imports resolved, and
`importlib.import_module("x")` / `__import__("x")` with a string literal, so a lazy import
cannot slip past. Only the layer order lets an import under ``if TYPE_CHECKING:`` through:
it names a type for the checker and runs nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

HERALD = frozenset({"protocol", "configuration", "interceptors", "proxy", "pipeline", "herald",
                    "tests", "bench", "fuzz"})
"""Herald's own top-level packages: anything else is the standard library or third-party."""

CHECKED = ("protocol", "configuration", "interceptors", "pipeline", "proxy", "herald")
"""The shipped packages whose imports the rules govern (a package missing from a tree, say
`herald` in a synthetic one, has nothing to check)."""

PROXY_LAYERS: tuple[tuple[str, ...], ...] = (
    ("net",),
    ("observability",),
    ("limits", "security"),
    ("upstream",),
    ("filters",),
    ("routing", "native"),
    ("session",),
    ("serving",),
    ("config",),
    ("server", "k8s", "devtools"),
    ("cli",),
)
"""The parts of `proxy/` (a folder, or a top-level module by its name), low to high. Each may
import itself and the layers before its own, nothing of its own layer or above."""

LAYER_OF = {part: level for level, parts in enumerate(PROXY_LAYERS) for part in parts}


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
    Rule("configuration", "configuration imports nothing of Herald's (stdlib and third-party "
         "only)", lambda name: _top(name) in HERALD and _top(name) != "configuration"),
    Rule("interceptors", "interceptors imports only protocol and configuration of Herald's",
         lambda name: _top(name) in HERALD - {"interceptors", "protocol", "configuration"}),
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


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _type_checking_only(tree: ast.AST) -> set[int]:
    """The ids of the nodes that run only under ``if TYPE_CHECKING:`` (not its ``else``)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.body:
                found.update(id(n) for n in ast.walk(stmt))
    return found


def imported_names(source: str, here: str = "", is_package: bool = False,
                   type_checking: bool = True) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of every import in `source`, wherever it is in the file. ``from
    x import y`` gives both ``x`` and ``x.y`` (``y`` may be a submodule). With
    `type_checking` False, the imports under ``if TYPE_CHECKING:`` are left out."""
    tree = ast.parse(source)
    skipped = set() if type_checking else _type_checking_only(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
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


def proxy_part(module: str) -> str | None:
    """The part of `proxy/` a dotted module name is in (its folder, or its top-level module),
    None outside `proxy` or for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "proxy" else None


def _layer_breach(here: str, name: str) -> str | None:
    """Why importing `name` from module `here` breaks the layer order, or None."""
    mine, theirs = proxy_part(here), proxy_part(name)
    if mine is None or theirs is None or mine == theirs:
        return None
    if mine not in LAYER_OF:
        return f"proxy.{mine} is in no layer of PROXY_LAYERS"
    if theirs not in LAYER_OF:
        return f"proxy.{theirs} is in no layer of PROXY_LAYERS"
    if LAYER_OF[theirs] < LAYER_OF[mine]:
        return None
    where = "its own layer" if LAYER_OF[theirs] == LAYER_OF[mine] else "a higher layer"
    return (f"proxy.{mine} (layer {LAYER_OF[mine] + 1}) imports only its own folder and lower "
            f"layers; proxy.{theirs} is {where} ({LAYER_OF[theirs] + 1})")


def _layer_violations(root: Path, allowed: frozenset[tuple[str, str]]) -> list[Violation]:
    found: list[Violation] = []
    package = root / "proxy"
    if not package.is_dir():
        return found
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        here = _module_of(path, root)
        excused = [module for where, module in allowed if where == rel]
        reported: set[int] = set()
        for line, name in imported_names(path.read_text(), here, path.name == "__init__.py",
                                         type_checking=False):
            if line in reported or any(_under(name, module) for module in excused):
                continue
            breach = _layer_breach(here, name)
            if breach is not None:
                reported.add(line)
                found.append(Violation(rel, line, name, breach))
    return found


def violations(root: Path, allowed: frozenset[tuple[str, str]] = frozenset()
               ) -> list[Violation]:
    """Every import under `root` that breaks a rule, in file and line order: one per line
    and rule (the first name it imports that breaks the rule). `allowed` holds (path,
    module) pairs that are let through: that file may import that module and what is below
    it."""
    found: list[Violation] = _layer_violations(root, allowed)
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
