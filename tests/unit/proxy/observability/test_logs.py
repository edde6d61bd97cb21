"""The two log formats: one event per line, key=value or JSON, with fields and tracebacks."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from proxy.observability import logs


@pytest.fixture
def herald_root() -> Iterator[None]:
    """`logs.configure` rewires the `herald` logger; put it back afterwards."""
    root = logging.getLogger("herald")
    saved = (list(root.handlers), root.level, root.propagate)
    try:
        yield
    finally:
        root.handlers[:], root.level, root.propagate = saved[0], saved[1], saved[2]


def test_kv_format_quotes_what_needs_quoting(
    herald_root: None, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure("info", "kv")
    logs.get_logger("session").warning(
        "connection_closed", reason="frame too large: 2 > 1", client="127.0.0.1:5000",
        client_id=None, empty="",
    )
    line = capsys.readouterr().err.strip()
    assert "\n" not in line
    assert line.startswith("ts=")
    assert " level=warning event=connection_closed " in line
    assert 'reason="frame too large: 2 > 1"' in line
    assert "client=127.0.0.1:5000" in line
    assert "client_id=None" in line
    assert 'empty=""' in line


def test_json_format_keeps_types_and_one_object_per_line(
    herald_root: None, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure("info", "json")
    log = logs.get_logger("server")
    log.info("upstream_state", reachable=False, brokers=3, lag=0.5, client_id=None)
    log.info("listening", address=("127.0.0.1", 1))
    first, second = capsys.readouterr().err.strip().splitlines()
    doc = json.loads(first)
    assert doc["level"] == "info" and doc["event"] == "upstream_state"
    assert doc["reachable"] is False and doc["brokers"] == 3 and doc["lag"] == 0.5
    assert doc["client_id"] is None
    assert isinstance(doc["ts"], float)
    assert json.loads(second)["address"] == "('127.0.0.1', 1)"  # other values as text


def test_level_filters_and_errors_carry_their_traceback(
    herald_root: None, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure("warning", "json")
    log = logs.get_logger("session")
    log.info("connection_closed", reason="client closed the connection")
    log.debug("noise")
    try:
        raise RuntimeError("bug in a filter")
    except RuntimeError as exc:
        log.error("connection_closed", exc_info=exc, reason="internal error")
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    doc = json.loads(lines[0])
    assert doc["level"] == "error" and doc["reason"] == "internal error"
    assert "RuntimeError: bug in a filter" in doc["exc"]
    assert "Traceback" in doc["exc"]
