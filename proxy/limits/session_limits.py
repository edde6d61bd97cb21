"""The bounds every session keeps, wherever its frames run.

A session's Python pumps and the native engine enforce the same four limits on the same
connection (the engine takes over mid-session and hands back mid-session), so they read them
from one value. It lives below both: `proxy.native` hands it to the engine as it is, and the
session environment carries it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from proxy.limits.config import LimitsConfig


@dataclass(frozen=True, slots=True)
class SessionLimits:
    """The largest frame, the most requests awaiting an answer, and the client's idle and
    frame deadlines (infinite: the session does not watch them)."""

    max_frame_bytes: int
    max_in_flight: int
    idle_timeout_s: float = math.inf
    frame_timeout_s: float = math.inf

    @classmethod
    def of(cls, config: LimitsConfig) -> SessionLimits:
        """The session's part of the `limits:` section."""
        return cls(config.max_frame_bytes, config.max_in_flight, config.idle_timeout_s,
                   config.frame_timeout_s)

    @property
    def watches_deadlines(self) -> bool:
        """Whether a session keeps its client's deadlines (a session without them is never
        closed for idling or for a slow frame)."""
        return self.idle_timeout_s != math.inf or self.frame_timeout_s != math.inf
