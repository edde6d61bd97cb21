"""Structured logs: one event per line, as `key=value` pairs or JSON, quiet by default.

Events are short snake_case names (`connection_closed`, `frame_refused`) with fields, so that
operators can grep and log pipelines can parse without regexes over prose.
"""

from __future__ import annotations

import json
import logging
import sys
import time

_ROOT = "herald"


class EventLogger:
    """A thin wrapper over `logging` that takes an event name and fields."""

    __slots__ = ("_log",)

    def __init__(self, name: str) -> None:
        self._log = logging.getLogger(f"{_ROOT}.{name}")

    def debug(self, event: str, **fields: object) -> None:
        if self._log.isEnabledFor(logging.DEBUG):
            self._log.debug(event, extra={"fields": fields})

    def info(self, event: str, **fields: object) -> None:
        if self._log.isEnabledFor(logging.INFO):
            self._log.info(event, extra={"fields": fields})

    def warning(
        self, event: str, *, exc_info: BaseException | None = None, **fields: object
    ) -> None:
        self._log.warning(event, exc_info=exc_info, extra={"fields": fields})

    def error(self, event: str, *, exc_info: BaseException | None = None, **fields: object) -> None:
        """`exc_info`: an exception whose traceback goes with the event (for bugs)."""
        self._log.error(event, exc_info=exc_info, extra={"fields": fields})


def get_logger(name: str) -> EventLogger:
    return EventLogger(name)


def _quote(value: object) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' "=\n\t'):
        return json.dumps(text)
    return text


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        parts = [
            f"ts={stamp}.{int(record.msecs):03d}Z",
            f"level={record.levelname.lower()}",
            f"event={record.getMessage()}",
        ]
        fields = getattr(record, "fields", {})
        parts.extend(f"{k}={_quote(v)}" for k, v in fields.items())
        if record.exc_info:
            parts.append(f"exc={_quote(self.formatException(record.exc_info))}")
        return " ".join(parts)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "ts": record.created,
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        doc.update({k: v if isinstance(v, int | float | bool) or v is None else str(v)
                    for k, v in getattr(record, "fields", {}).items()})
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc)


def configure(level: str = "warning", fmt: str = "kv") -> None:
    """Send Herald's events to stderr at `level` in format `kv` or `json`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    root = logging.getLogger(_ROOT)
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
