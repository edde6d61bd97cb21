"""What running out of file descriptors looks like from a socket call.

Herald needs two descriptors for every client connection (the client's socket and its
upstream one). At the process's open-files limit `accept(2)` and `socket(2)` fail with
`EMFILE` (or `ENFILE` at the system's limit); the kernel can also lack memory for a new socket
(`ENOBUFS`, `ENOMEM`). These are the proxy's own capacity running out, not a broken peer, and
are reported as such.
"""

from __future__ import annotations

import errno
import os

DESCRIPTOR_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})
"""The process (EMFILE) or the system (ENFILE) has no descriptor left."""

CAPACITY_ERRNOS = DESCRIPTOR_ERRNOS | {errno.ENOBUFS, errno.ENOMEM}
"""Errors of `accept(2)` that say the proxy is out of capacity: the connection waits in the
kernel's backlog and can be accepted once capacity is back (trio's own list)."""


OUT_OF_DESCRIPTORS = "out of file descriptors"
"""The reason Herald gives (a closed connection, readiness) when it lacked a descriptor."""


class OutOfDescriptors(ConnectionError):
    """A socket could not be opened: the process or the system has no descriptor left.

    A `ConnectionError`, so that code which handles a cluster it cannot reach goes on
    working; code that can say more catches it first."""

    errno: int  # never None here, unlike OSError's: `__init__` always passes the code

    def __init__(self, code: int) -> None:
        super().__init__(code, f"{OUT_OF_DESCRIPTORS} ({errno.errorcode[code]})")

    @property
    def name(self) -> str:
        """`EMFILE` or `ENFILE`."""
        return errno.errorcode[self.errno]


def descriptor_shortage(exc: BaseException) -> int | None:
    """`EMFILE`/`ENFILE` when `exc` is, or was caused by, a lack of descriptors (trio's
    `open_tcp_stream` wraps the errors of each attempt in an exception group); else None."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        e = pending.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in DESCRIPTOR_ERRNOS:
            return e.errno
        if isinstance(e, BaseExceptionGroup):
            pending.extend(e.exceptions)
        for linked in (e.__cause__, e.__context__):
            if linked is not None:
                pending.append(linked)
    return None


def descriptor_free(fd: int) -> bool:
    """Whether the process could open one more descriptor now (tried by duplicating `fd`, an
    open descriptor of its own, and closing the copy)."""
    try:
        os.close(os.dup(fd))
    except OSError as exc:
        if exc.errno in DESCRIPTOR_ERRNOS:
            return False
        raise
    return True
