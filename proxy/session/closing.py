"""How a session ends: an exception that carries the one reason to log.

Every part of a session (the pumps, the streamer, re-authentication, the native phases) ends
it the same way, by raising `SessionClosed`; the session keeps the first reason (or the first
bug) and logs it once, when both connections are closed.
"""

from __future__ import annotations


class SessionClosed(Exception):
    """Ends a session; `reason` is what gets logged, once."""

    def __init__(self, reason: str, level: str = "info", exc: BaseException | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.level = level
        self.exc = exc  # logged with its traceback (level "error": a bug, not bad input)
