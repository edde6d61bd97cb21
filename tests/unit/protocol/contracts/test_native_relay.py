"""protocol/contracts/native_relay.py is the one place the native relay's shared names are
written: the committed C header is what the generator renders from it, and neither the C
sources nor Herald's Python spell one of them out again.

The C engine answers with named results (enums, as relay_tls.h's NT_*), never with bare
numbers; the fuzz targets (fuzz/native/) read them by the same names. Python reads a
hand-over's kind and the engine's byte counts by the contract's names, never by a literal
or a position."""

from __future__ import annotations

import ast
import pathlib
import re
from collections.abc import Iterable, Iterator

from protocol.codegen.native_relay import HEADER_PATH, render_native_relay_header
from protocol.compression import CODEC_NAMES
from protocol.contracts import native_relay
from tests.support.native_parts import native_module

ROOT = pathlib.Path(__file__).resolve().parents[4]
GENERATED = ROOT / HEADER_PATH
SOURCE = ROOT / "protocol" / "contracts" / "native_relay.py"
ENGINE_C = ROOT / "proxy" / "native"
FUZZ_C = ROOT / "fuzz" / "native"

# Reasons whose names are words of their own ("request", "response", "drain", "reauth") are
# left out of the search: they stand for other things too.
_WORDS = {native_relay.REQUEST, native_relay.RESPONSE, native_relay.DRAIN, native_relay.REAUTH}
REASONS = {name for name, _ in native_relay.HANDOVER_REASONS} - _WORDS
HANDOVER_KINDS = {kind for _, kind in native_relay.HANDOVER_REASONS}
C_KINDS = HANDOVER_KINDS - {native_relay.UPSTREAM, native_relay.CLOSE}
"""The hand-over kinds looked for in C: "upstream" names a session's side there (in its
socket errors) and "close" a method of the engine's Python type."""
COUNTERS = set(native_relay.FETCH_COUNTERS + native_relay.PRODUCE_COUNTERS)
DIRECTIONS = set(native_relay.BYTE_DIRECTIONS)
HEADER_KEYS = set(native_relay.HEADERS.values())
KINDS = set(native_relay.COLUMN_KINDS) - {native_relay.COLUMN_CONST}  # "const": a C keyword
CODECS = set(CODEC_NAMES.values()) - {"none"}
MESSAGE_HEADS = tuple(text.partition(": ")[0] + ": " for text in native_relay.MESSAGES.values())
"""How each deadline message begins (the limit's YAML path): a literal that begins so writes
the message again."""

# Literals that are the same words for something else: the engine's keyword arguments are
# named after the limits.
C_ALLOWED = {("_relay.c", "idle_timeout"), ("_relay.c", "frame_timeout")}

# Negative numbers the native C may return or compare with, each a result of someone else's:
# CPython's (`_relay.c`: an init's -1, PyLong_AsLongLong's -1 with an exception set).
C_NUMBERS_ALLOWED = {("_relay.c", -1)}


def _c_sources() -> list[pathlib.Path]:
    return sorted(p for folder in (ENGINE_C, ROOT / "protocol", FUZZ_C)
                  for pattern in ("*.c", "*.h") for p in folder.glob(pattern)
                  if p != GENERATED)


def _c_literals(text: str) -> list[tuple[int, str]]:
    """The string literals of C source outside its comments, with their lines."""
    found = []
    pattern = re.compile(r'/\*.*?\*/|//[^\n]*|"((?:[^"\\\n]|\\.)*)"', re.S)
    for match in pattern.finditer(text):
        if match.group(1) is not None:
            found.append((text.count("\n", 0, match.start()) + 1, match.group(1)))
    return found


def restated_in_c(name: str, text: str) -> list[str]:
    facts = REASONS | HEADER_KEYS | KINDS | CODECS | C_KINDS
    return [f"{name}:{line}: {value!r}" for line, value in _c_literals(text)
            if (value in facts or value.startswith(MESSAGE_HEADS))
            and (name, value) not in C_ALLOWED]


# ---- the C's results: named, never bare numbers ---------------------------------------------

_C_TOKENS = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'', re.S)
_PREPROCESSOR = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)
_ENUM = re.compile(r"\benum\b\s*\w*\s*\{([^}]*)\}")
_FUNCTION_HEAD = re.compile(r"(\w+)\s*\((?:[^()]|\([^()]*\))*\)\s*$")
_RETURN = re.compile(r"\breturn\b\s*([^;]*);")
_CASTS = re.compile(r"^(?:\(\s*[A-Za-z_][\w\s*]*\)\s*)+")
_NUMBER = re.compile(r"-?\d+")
_CALL = re.compile(r"(\w+)\s*\(.*\)", re.S)
_CHOICE = re.compile(r"[^?]*\?\s*(\w+)\s*:\s*(\w+)", re.S)
_COMPARE = r"(?:==|!=|<=|>=|<(?!<)|>(?!>))"
_OPERAND_START = r"(?:(?<=[(,&|!?:])|(?<=[(,&|!?:] ))"
"""Where an operand begins: after an opening parenthesis, a comma or an operator that is no
arithmetic (so `n - 1 == m` is no comparison of -1)."""
_BARE_NEGATIVE = re.compile(r"\breturn\s+(?:\(\s*[A-Za-z_][\w\s*]*\)\s*)*(-\s*\d+)\s*;"
                            rf"|(?:==|!=)\s*(-\s*\d+)\b|{_OPERAND_START}(-\s*\d+)\s*(?:==|!=)")
_GIVEN = re.compile(r"\b(\w+)\s*=(?!=)\s*(?:\(\s*[A-Za-z_][\w\s*]*\)\s*)*(\w+)\s*\(")
_VERSION = r"(?:\bver|\bversion|\w+_ver)"
_VERSION_NUMBER = re.compile(rf"{_VERSION}\s*{_COMPARE}\s*([1-9]\d*)\b"
                             rf"|\b([1-9]\d*)\s*{_COMPARE}\s*{_VERSION}\b")


def _blank(match: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def c_code(text: str) -> str:
    """C source with its comments, literals and preprocessor lines blanked (its lines kept):
    the code alone."""
    return _PREPROCESSOR.sub(_blank, _C_TOKENS.sub(_blank, text))


def c_enum_names(code: str) -> set[str]:
    names = set()
    for match in _ENUM.finditer(code):
        for item in match.group(1).split(","):
            name = item.partition("=")[0].strip()
            if name.isidentifier():
                names.add(name)
    return names


def c_functions(code: str) -> Iterator[tuple[str, int, str]]:
    """(name, offset of its body, body) of each function defined in `code`."""
    depth, start, current = 0, 0, None
    for at, char in enumerate(code):
        if char == "{":
            if depth == 0:
                head = code[start:at]
                match = _FUNCTION_HEAD.search(head)
                current = (match.group(1), at) if match and "=" not in head else None
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                if current is not None:
                    yield current[0], current[1], code[current[1]:at + 1]
                current, start = None, at + 1
        elif char == ";" and depth == 0:
            start = at + 1


def _returned(body: str) -> list[tuple[str, int]]:
    """What each `return` of a body returns (casts left out), with its offset."""
    return [(_CASTS.sub("", match.group(1).strip()), match.start())
            for match in _RETURN.finditer(body) if match.group(1).strip()]


def _assigned_from(body: str, variable: str) -> list[str]:
    """What `variable` is given in `body`: the text after each `variable =`."""
    return [match.group(1) for match in
            re.finditer(rf"\b{re.escape(variable)}\s*=(?!=)\s*([^;]*)", body)]


def _by_place(found: list[str]) -> list[str]:
    """Findings (`file:line: what`) by file, then line."""
    def place(finding: str) -> tuple[str, int]:
        name, line, _ = finding.split(":", 2)
        return name, int(line)
    return sorted(found, key=place)


def _line(code: str, offset: int) -> int:
    return code.count("\n", 0, offset) + 1


def _gives_named(value: str, named: set[str], enums: set[str]) -> bool:
    """Whether what a variable is given (the text after its `=`) is a named result: an enum's
    name, or what a function with named results returns."""
    match = re.match(r"\s*(\w+)\s*(\()?", _CASTS.sub("", value.strip()))
    return match is not None and (match.group(1) in enums if match.group(2) is None
                                  else match.group(1) in named)


def named_result_functions(bodies: dict[str, str], enums: set[str]) -> set[str]:
    """The functions whose every result is named: each returns an enum's name, one of two, a
    variable that holds one, or what another such function returns; and at least one of its
    results is so named."""
    named: set[str] = set()

    def holds_named(value: str, body: str) -> bool:
        if value in enums:
            return True
        choice = _CHOICE.fullmatch(value)
        if choice is not None:
            return all(name in enums for name in choice.groups())
        call = _CALL.fullmatch(value)
        if call is not None:
            return call.group(1) in named
        if value.isidentifier():
            given = _assigned_from(body, value)
            return bool(given) and all(_gives_named(g, named, enums) for g in given)
        return False

    while True:
        more = set(named)
        for name, body in bodies.items():
            values = [value for value, _ in _returned(body)]
            if values and all(holds_named(value, body) for value in values):
                more.add(name)
        if more == named:
            return named
        named = more


def _call_ends(code: str, at: int) -> int:
    """Where the call whose `(` is at `at` ends (past the spaces that follow it)."""
    depth = 0
    for end in range(at, len(code)):
        depth += {"(": 1, ")": -1}.get(code[end], 0)
        if depth == 0:
            break
    return _past(code, end + 1)


def _past(code: str, at: int, closing: str = "") -> int:
    """Past the spaces at `at`, and `closing` and the spaces after it if it is next."""
    while at < len(code) and code[at].isspace():
        at += 1
    if closing and code.startswith(closing, at):
        return _past(code, at + len(closing))
    return at


def bare_results_in_c(engine: dict[str, str], harnesses: dict[str, str] | None = None,
                      headers: Iterable[str] = ()) -> list[str]:
    """The bare numbers of the engine's C (`engine`, and the fuzz targets that drive it,
    `harnesses`: file name -> text) where its results have names (the enums of the sources
    and of `headers`): a function with named results that also returns a number; a named
    result compared with a number; a protocol version compared with a number; and in the
    engine, a negative number returned or compared with."""
    codes = {name: c_code(text) for name, text in {**(harnesses or {}), **engine}.items()}
    enums: set[str] = set()
    for code in [*codes.values(), *map(c_code, headers)]:
        enums |= c_enum_names(code)
    bodies = {function: body for code in codes.values()
              for function, _, body in c_functions(code)}
    named = named_result_functions(bodies, enums)
    calls = re.compile(r"\b(" + "|".join(sorted(named)) + r")\s*\(") if named else None
    found = []
    for name, code in codes.items():
        for function, start, body in c_functions(code):
            values = _returned(body)
            if any(value in enums for value, _ in values):
                found += [f"{name}:{_line(code, start + at)}: {function} returns {value}, "
                          "unnamed" for value, at in values if _NUMBER.fullmatch(value)]
            if calls is None:
                continue
            holders = {match.group(1) for match in _GIVEN.finditer(body)
                       if match.group(2) in named}
            for variable in sorted(v for v in holders if all(
                    _gives_named(given, named, enums) for given in _assigned_from(body, v))):
                pattern = re.compile(rf"\b{variable}\s*{_COMPARE}\s*(-?\d+)\b"
                                     rf"|{_OPERAND_START}(-?\d+)\s*{_COMPARE}\s*{variable}\b")
                found += [f"{name}:{_line(code, start + m.start())}: {function} compares "
                          f"{variable} (a named result) with {m.group(1) or m.group(2)}"
                          for m in pattern.finditer(body)]
            for match in calls.finditer(body):
                end = _call_ends(body, match.end() - 1)
                if re.search(r"\(\s*\w+\s*=\s*$", body[:match.start()]):  # (r = f(...)) < 0
                    end = _past(body, end, ")")
                compared = re.match(rf"{_COMPARE}\s*(-?\d+)\b", body[end:])
                if compared is not None:
                    found.append(f"{name}:{_line(code, start + match.start())}: {function} "
                                 f"compares {match.group(1)}'s result with {compared.group(1)}")
        for match in _BARE_NEGATIVE.finditer(code if name in engine else ""):
            number = int(re.sub(r"\s", "", next(g for g in match.groups() if g)))
            if (name, number) not in C_NUMBERS_ALLOWED:
                found.append(f"{name}:{_line(code, match.start())}: {number}, unnamed")
        for match in _VERSION_NUMBER.finditer(code):
            found.append(f"{name}:{_line(code, match.start())}: version "
                         f"{match.group(1) or match.group(2)}, unnamed (contracts/features.h, "
                         "the engine's ranges)")
    return _by_place(found)


# ---- Python: a hand-over's kind and the byte counts by name ---------------------------------

def _is_kind(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in HANDOVER_KINDS
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_is_kind(item) for item in node.elts)
    return False


def _kinds_by_reason(node: ast.expr) -> bool:
    """The engine's reason -> kind mapping (`Capabilities.reasons`, capabilities()'s)."""
    return ((isinstance(node, ast.Attribute) and node.attr == "reasons")
            or (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
                and node.slice.value == "reasons"))


def _engine(node: ast.expr) -> bool:
    named = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return "engine" in named


def _from_engine_collect(node: ast.expr) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "collect" and _engine(node.func.value))


def _over_directions(node: ast.expr) -> bool:
    """A comprehension over BYTE_DIRECTIONS: its items are in the directions' order."""
    return (isinstance(node, ast.GeneratorExp | ast.ListComp)
            and any(isinstance(g.iter, ast.Name | ast.Attribute)
                    and (getattr(g.iter, "id", None) or getattr(g.iter, "attr", None))
                    == "BYTE_DIRECTIONS" for g in node.generators))


def spelled_in_python(name: str, text: str) -> list[str]:
    """A hand-over kind written as a literal where the engine's kinds are read or compared,
    and the engine's byte counts taken by their place."""
    tree = ast.parse(text)
    kinds: set[str] = set()  # names given a hand-over kind
    counts: set[str] = set()  # names given the engine's byte counts

    def holds_kind(node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in kinds
        if isinstance(node, ast.Subscript):
            return _kinds_by_reason(node.value)
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
            node.func.attr == "ended"  # path_choice.SessionPath.ended: the reason's kind
            or (node.func.attr == "get" and _kinds_by_reason(node.func.value)))

    def holds_counts(node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in counts
        if isinstance(node, ast.Attribute):
            return node.attr == "tls_bytes"
        return (isinstance(node, ast.Subscript) and _from_engine_collect(node.value)
                and isinstance(node.slice, ast.Constant) and node.slice.value == 0)

    for _ in range(2):  # names given from names given before
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and holds_kind(node.value):
                        kinds.add(target.id)
                    if isinstance(target, ast.Name) and holds_counts(node.value):
                        counts.add(target.id)
                    if (isinstance(target, ast.Tuple) and target.elts
                            and isinstance(target.elts[0], ast.Name)
                            and _from_engine_collect(node.value)):
                        counts.add(target.elts[0].id)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(holds_kind(o) for o in operands):
                found += [f"{name}:{o.lineno}: a hand-over kind spelt out" for o in operands
                          if _is_kind(o)]
        elif isinstance(node, ast.Call) and holds_kind(node):
            found += [f"{name}:{a.lineno}: a hand-over kind spelt out" for a in node.args
                      if _is_kind(a)]
        elif isinstance(node, ast.Match) and holds_kind(node.subject):
            found += [f"{name}:{case.pattern.lineno}: a hand-over kind spelt out"
                      for case in node.cases if isinstance(case.pattern, ast.MatchValue)
                      and _is_kind(case.pattern.value)]
        elif (isinstance(node, ast.Subscript) and holds_counts(node.value)
              and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int)):
            found.append(f"{name}:{node.lineno}: a byte count taken by its place")
        elif (isinstance(node, ast.Assign) and any(isinstance(t, ast.Tuple)
                                                   for t in node.targets)
              and (holds_counts(node.value) or _over_directions(node.value))):
            found.append(f"{name}:{node.lineno}: the byte directions unpacked by their order")
    return _by_place(found)


def restated_in_python(name: str, text: str) -> list[str]:
    facts = REASONS | COUNTERS | DIRECTIONS
    return [f"{name}:{node.lineno}: {node.value!r}" for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and (node.value in facts or node.value.startswith(MESSAGE_HEADS))]


def _python_sources() -> Iterator[tuple[str, str]]:
    for folder in ("proxy", "interceptors", "pipeline", "protocol"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == SOURCE or "messages" in path.parts:
                continue
            yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")


def _c_texts(folder: pathlib.Path) -> dict[str, str]:
    """The C of the engine (ENGINE_C) or of its fuzz targets (FUZZ_C), by file name."""
    return {p.name: p.read_text(encoding="utf-8") for pattern in ("*.c", "*.h")
            for p in sorted(folder.glob(pattern))}


def _headers() -> list[str]:
    """The headers the engine includes from outside its folder (their enums name results)."""
    return [p.read_text(encoding="utf-8") for folder in (ROOT / "protocol",
                                                          ROOT / "protocol" / "contracts")
            for p in sorted(folder.glob("*.h"))]


def test_the_committed_header_is_what_the_generator_renders() -> None:
    assert GENERATED.read_text(encoding="utf-8") == render_native_relay_header(), (
        "regenerate with `python -m proxy.devtools.codegen`")


def test_the_engine_says_what_the_contract_says() -> None:
    relay = native_module("proxy.native._relay")
    said = relay.capabilities()["reasons"]
    assert list(said.items()) == list(native_relay.HANDOVER_REASONS)


def test_no_c_source_restates_a_fact() -> None:
    found = []
    for path in _c_sources():
        found += restated_in_c(path.name, path.read_text(encoding="utf-8"))
    assert found == []


def test_the_engines_results_are_named() -> None:
    assert bare_results_in_c(_c_texts(ENGINE_C), _c_texts(FUZZ_C), _headers()) == []


def test_no_python_module_restates_a_fact() -> None:
    found = []
    for name, text in _python_sources():
        found += restated_in_python(name, text) + spelled_in_python(name, text)
    assert found == []


def test_the_checks_find_what_they_look_for() -> None:
    """What the sources held before the contract: found."""
    c = ('const char *const NE_REASONS[] = {"", "request", "client_eof"}; /* "drain" */\n'
         '#define TRACESTATE "tracestate"\n'
         '#define NK_CODEC_NAMES {"none", "gzip"}\n'
         'snprintf(why, n, "limits.idle_timeout_s: idle for %g s", s->idle_s);\n'
         'return !strcmp(NE_REASON_KINDS[i], "resume");\n')
    assert restated_in_c("relay_engine.c", c) == [
        "relay_engine.c:1: 'client_eof'", "relay_engine.c:2: 'tracestate'",
        "relay_engine.c:3: 'gzip'", "relay_engine.c:4: 'limits.idle_timeout_s: idle for %g s'",
        "relay_engine.c:5: 'resume'"]
    python = ('FETCH_COUNTERS = ("link_remembered", "link_evicted", "link_expired")\n'
              'IDLE_TIMEOUT = "idle_timeout"\n'
              'why = f"limits.frame_timeout_s: a frame was not complete {s:g} s after it began"\n'
              'metrics.bytes.labels("client_to_proxy")\n')
    assert len(restated_in_python("old.py", python)) == 6


# What the engine's C held before its results were named (relay_engine.c, relay_frames.c and
# a fuzz target), and what is no result: a count, a length on the wire, a flag.
_UNNAMED_C = """\
enum { IO_ERROR = -2, IO_EOF = -1, IO_WAIT = 0, IO_DONE = 1 };
static int read_into(int fd) {
    ssize_t n = recv(fd, buf, 1, 0);
    if (n > 0) {
        return IO_DONE;
    }
    return n == 0 ? IO_EOF : IO_ERROR;
}
static int pull(int fd) {
    int r = read_into(fd);
    return r;
}
static int write_into(int fd) {
    if (send(fd, buf, 1, 0) == 0) {
        return -1;
    }
    return IO_DONE;
}
static void service(int fd) {
    int r = pull(fd);
    if (r == -2) {
        fail();
    }
    if (pull(fd) == IO_DONE || read_into(fd) < 0) {
        more();
    }
}
int nr_produce_acks(const uint8_t *p, size_t avail, int ver, int16_t *acks) {
    if (ver >= 9) {
        flexible();
    }
    return -1;
}
"""
_NOT_RESULTS_C = """\
enum { NR_UNREADABLE = -1, NR_NEED_MORE = 0, NR_READ = 1 };
int nr_uvarint(const uint8_t *p, size_t *pos, size_t limit, uint64_t *out) {
    return *pos < limit ? NR_READ : NR_NEED_MORE;
}
int64_t nr_top_level_tags(const uint8_t *frame, size_t len, int api, int ver) {
    uint64_t count = 0;
    if (nr_uvarint(frame, &len, len, &count) != NR_READ || ver < 0) {
        return NR_UNREADABLE;
    }
    return (int64_t)count;
}
static void walk(const uint8_t *p, size_t len) {
    int64_t n = rd_int(p, 2);
    if (n < -1 || nr_top_level_tags(p, len, 0, 10) != 0) {
        refuse();
    }
    int ok = all_zero(p, len);
    if (ok == 1) {
        done();
    }
}
"""


def test_the_results_check_finds_what_it_looks_for() -> None:
    assert bare_results_in_c({"relay_engine.c": _UNNAMED_C}) == [
        "relay_engine.c:15: write_into returns -1, unnamed",
        "relay_engine.c:15: -1, unnamed",
        "relay_engine.c:21: service compares r (a named result) with -2",
        "relay_engine.c:21: -2, unnamed",
        "relay_engine.c:24: service compares read_into's result with 0",
        "relay_engine.c:29: version 9, unnamed (contracts/features.h, the engine's ranges)",
        "relay_engine.c:32: -1, unnamed"]
    assert bare_results_in_c({"relay_frames.c": _NOT_RESULTS_C}) == []
    # CPython's own -1 is _relay.c's to return.
    init = "static int engine_init(PyObject *self) {\n    return -1;\n}\n"
    assert bare_results_in_c({"_relay.c": init}) == []
    assert bare_results_in_c({"relay_stamp.c": init}) == ["relay_stamp.c:2: -1, unnamed"]


def test_the_python_check_finds_what_it_looks_for() -> None:
    python = ('kind = self._caps.reasons.get(reason, "close")\n'
              'if kind == "deadline" or path.ended(reason, 0) in ("resume", "upstream"):\n'
              '    pass\n'
              'assert capabilities()["reasons"][reason] != "resume"\n'
              'match kind:\n'
              '    case "upstream":\n'
              '        pass\n'
              'read += rig.engine.collect()[0][2]\n'
              'counted, pairs = self._engine.collect()\n'
              'total = counted[0] + self._engine.tls_bytes[3]\n'
              'a, b, c, d = (metrics.bytes.labels(x) for x in BYTE_DIRECTIONS)\n'
              'a, b, c, d = engine.tls_bytes\n')
    assert spelled_in_python("old.py", python) == [
        "old.py:1: a hand-over kind spelt out", "old.py:2: a hand-over kind spelt out",
        "old.py:2: a hand-over kind spelt out", "old.py:4: a hand-over kind spelt out",
        "old.py:6: a hand-over kind spelt out", "old.py:8: a byte count taken by its place",
        "old.py:10: a byte count taken by its place",
        "old.py:10: a byte count taken by its place",
        "old.py:11: the byte directions unpacked by their order",
        "old.py:12: the byte directions unpacked by their order"]
    # The same words for other things, and positions of other tuples: not kinds, nor counts.
    other = ('if headers.get("connection", "").lower() != "close" or name == "upstream":\n'
             '    pass\n'
             'fields = {"upstream": address}\n'
             'gc.collect()\n'
             'rows = registry.collect()[0]\n'
             'turns, deadlines, tls_walks = rig.engine.walks\n'
             'first = pairs[(1, 12)][0]\n')
    assert spelled_in_python("other.py", other) == []


def _planted(path: pathlib.Path, old: str, new: str) -> str:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) >= 1, f"{path.name} no longer holds {old!r}"
    return text.replace(old, new, 1)


def test_a_fault_planted_in_the_sources_is_found() -> None:
    """The real sources, each with one fact spelt out again: each is found, and nothing else."""

    def c_found(folder: pathlib.Path, name: str, old: str, new: str) -> list[str]:
        engine, harnesses = _c_texts(ENGINE_C), _c_texts(FUZZ_C)
        (engine if folder == ENGINE_C else harnesses)[name] = _planted(folder / name, old, new)
        return [f.partition(": ")[2] for f in bare_results_in_c(engine, harnesses, _headers())
                if f.startswith(name + ":")]

    def python_found(path: pathlib.Path, old: str, new: str) -> list[str]:
        planted = _planted(path, old, new)
        return [f.partition(": ")[2] for f in (restated_in_python(path.name, planted)
                                               + spelled_in_python(path.name, planted))]

    # A read's error as a number again, in a function whose other results are named.
    assert c_found(ENGINE_C, "relay_engine.c", "return IO_ERROR;\n}\n\n/* ---- splicing",
                   "return -2;\n}\n\n/* ---- splicing") == [
        "read_into returns -2, unnamed", "-2, unnamed"]
    # A frame reader's answer compared with the number it stands for.
    assert c_found(ENGINE_C, "relay_engine.c", "(r == NR_NEED_MORE && seen == whole)",
                   "(r == 0 && seen == whole)") == [
        "decide_request compares r (a named result) with 0"]
    assert c_found(FUZZ_C, "fuzz_frames.c", "== NR_NEED_MORE,\n", "== 0,\n") == [
        "uvarint_agrees compares nr_uvarint's result with 0"]
    # The newest Produce version the stamp walks, in a fuzz target's reading of a request.
    assert c_found(FUZZ_C, "fuzz_stamp.c", "ver <= NR_PRODUCE_MAX_VERSION", "ver <= 13") == [
        "version 13, unnamed (contracts/features.h, the engine's ranges)"]
    # A hand-over's kind, a direction and a byte count's place, in Python.
    native = ROOT / "proxy" / "native"
    session = ROOT / "proxy" / "session"
    assert python_found(native / "path_choice.py", "native_relay.CLOSE)", '"close")') == [
        "a hand-over kind spelt out"]
    assert python_found(session / "native_phases.py", "kind == native_relay.DEADLINE",
                        'kind == "deadline"') == ["a hand-over kind spelt out"]
    assert python_found(native / "relay.py", "zip(BYTE_DIRECTIONS, counted, strict=True)",
                        "((CLIENT_TO_PROXY, counted[0]),)") == [
        "a byte count taken by its place"]
    assert python_found(session / "session.py", "read=counted(CLIENT_TO_PROXY)",
                        'read=counted("client_to_proxy")') == ["'client_to_proxy'"]
