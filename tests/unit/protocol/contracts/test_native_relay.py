"""protocol/contracts/native_relay.py is the one place the native relay's shared names are
written: the committed C header is what the generator renders from it, and neither the C
sources nor Herald's Python spell one of them out again."""

from __future__ import annotations

import ast
import pathlib
import re

from protocol.codegen.native_relay import HEADER_PATH, render_native_relay_header
from protocol.compression import CODEC_NAMES
from protocol.contracts import native_relay
from tests.support.native_parts import native_module

ROOT = pathlib.Path(__file__).resolve().parents[4]
GENERATED = ROOT / HEADER_PATH
SOURCE = ROOT / "protocol" / "contracts" / "native_relay.py"

# Reasons whose names are words of their own ("request", "response", "drain", "reauth") are
# left out of the search: they stand for other things too.
_WORDS = {native_relay.REQUEST, native_relay.RESPONSE, native_relay.DRAIN, native_relay.REAUTH}
REASONS = {name for name, _ in native_relay.HANDOVER_REASONS} - _WORDS
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


def _c_sources() -> list[pathlib.Path]:
    return sorted(p for folder in (ROOT / "proxy" / "native", ROOT / "protocol")
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
    facts = REASONS | HEADER_KEYS | KINDS | CODECS
    return [f"{name}:{line}: {value!r}" for line, value in _c_literals(text)
            if (value in facts or value.startswith(MESSAGE_HEADS))
            and (name, value) not in C_ALLOWED]


def restated_in_python(name: str, text: str) -> list[str]:
    facts = REASONS | COUNTERS | DIRECTIONS
    return [f"{name}:{node.lineno}: {node.value!r}" for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and (node.value in facts or node.value.startswith(MESSAGE_HEADS))]


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


def test_no_python_module_restates_a_fact() -> None:
    found = []
    for folder in ("proxy", "interceptors", "pipeline", "protocol"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == SOURCE or "messages" in path.parts:
                continue
            found += restated_in_python(str(path.relative_to(ROOT)),
                                        path.read_text(encoding="utf-8"))
    assert found == []


def test_the_checks_find_what_they_look_for() -> None:
    """What the sources held before the contract: found."""
    c = ('const char *const NE_REASONS[] = {"", "request", "client_eof"}; /* "drain" */\n'
         '#define TRACESTATE "tracestate"\n'
         '#define NK_CODEC_NAMES {"none", "gzip"}\n'
         'snprintf(why, n, "limits.idle_timeout_s: idle for %g s", s->idle_s);\n')
    assert restated_in_c("relay_engine.c", c) == [
        "relay_engine.c:1: 'client_eof'", "relay_engine.c:2: 'tracestate'",
        "relay_engine.c:3: 'gzip'", "relay_engine.c:4: 'limits.idle_timeout_s: idle for %g s'"]
    python = ('FETCH_COUNTERS = ("link_remembered", "link_evicted", "link_expired")\n'
              'IDLE_TIMEOUT = "idle_timeout"\n'
              'why = f"limits.frame_timeout_s: a frame was not complete {s:g} s after it began"\n'
              'metrics.bytes.labels("client_to_proxy")\n')
    assert len(restated_in_python("old.py", python)) == 6

