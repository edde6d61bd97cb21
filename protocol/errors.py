"""The one error type every decoder in `protocol` raises on bad input."""


class CodecError(ValueError):
    """Bytes that do not form a valid message: truncated, oversized, or inconsistent."""
