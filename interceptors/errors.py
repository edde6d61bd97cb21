"""Errors of the interceptor layer, and the Kafka error codes it answers clients with.

Only the codes this layer produces are named here (re-exported from the generated table in
`protocol.contracts.kafka_errors`, where every other code is). The choice follows what the
broker itself does, so client libraries react the way their users already know:

* `INVALID_RECORD` (87) is what a broker answers when a record fails its own validation
  (KIP-467). It is not retriable: the Java producer fails the batch at once and, from Produce
  v8, reports the culprit records by index. Header policies (`require_headers`,
  `header_limits`, forged audit headers) use it. `MESSAGE_TOO_LARGE` is deliberately not used
  for header limits: producers react to it by splitting the batch and retrying, which cannot
  help here.
* `UNKNOWN_SERVER_ERROR` (-1) is the honest answer when an interceptor itself failed and its
  `on_error` policy is `reject`. Also not retriable.
"""

from __future__ import annotations

from protocol.contracts.kafka_errors import INVALID_RECORD, NONE, UNKNOWN_SERVER_ERROR

__all__ = ["INVALID_RECORD", "NONE", "UNKNOWN_SERVER_ERROR", "RejectRecord"]


class RejectRecord(Exception):
    """Refuse the partition a record belongs to (produce path only).

    Raise it from `on_record`, or return an instance as the verdict; both mean the same. Nothing
    of the partition is written and the client gets `error_code` with `message`. `reason` is a
    short, fixed label for metrics (keep its cardinality low; put details in `message`).
    """

    def __init__(
        self, error_code: int = INVALID_RECORD, message: str = "", reason: str = "policy"
    ) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message
        self.reason = reason

    def __repr__(self) -> str:
        return f"RejectRecord({self.error_code}, {self.message!r}, reason={self.reason!r})"
