"""What every generated message class has, whatever its API.

Code that handles messages of any API (the session's framing, the filter chain, the registries
of `protocol.messages`) is written against `Message`; code that reads an API's fields narrows
to that API's class. A Protocol rather than a common base: the generated classes stay plain,
nothing is looked up through a base at run time, and the type checker proves that each class
in the registries has all of it.
"""

from __future__ import annotations

from typing import Protocol, Self

from protocol.primitives import Buffer


class Message(Protocol):
    """A generated message: the versions its codec reads and writes, the codec itself, and the
    tagged fields Herald does not know (kept so that they are written back unchanged)."""

    MIN_VERSION: int
    MAX_VERSION: int
    unknown_tagged_fields: dict[int, bytes] | None

    def __init__(self, **fields: object) -> None:
        """Every field is a keyword argument with the spec's default, so a registry's class
        is built knowing only its API key (`REQUESTS[key](field=...)`)."""

    @classmethod
    def decode(cls, buf: Buffer, version: int, offset: int = 0) -> Self:
        """A whole body: raises CodecError unless `buf[offset:]` holds exactly one message."""
        ...

    @classmethod
    def decode_from(cls, buf: Buffer, version: int, offset: int = 0) -> tuple[Self, int]:
        """One message starting at `offset`, and where it ends (more may follow)."""
        ...

    def encode(self, version: int) -> bytes: ...

    def encode_into(self, out: bytearray, version: int) -> None:
        """Appends the body; on error `out` is left as it was."""
        ...
