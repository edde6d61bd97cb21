"""Telling Herald's own lack of descriptors from a broker that cannot be reached, through the
wrapping trio's connect puts around the error of each attempt."""

from __future__ import annotations

import errno
import os
import resource
import socket

import pytest
import trio

from proxy.net.descriptors import (
    OUT_OF_DESCRIPTORS,
    OutOfDescriptors,
    descriptor_free,
    descriptor_shortage,
)


def wrapped(inner: OSError) -> OSError:
    """What trio.open_tcp_stream raises when every attempt failed."""
    try:
        raise OSError("all attempts to connect to 127.0.0.1:9092 failed") from ExceptionGroup(
            "all attempts", [inner])
    except OSError as exc:
        return exc


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE])
def test_a_descriptor_shortage_is_found_under_the_wrapping(code: int) -> None:
    assert descriptor_shortage(OSError(code, "Too many open files")) == code
    assert descriptor_shortage(wrapped(OSError(code, "Too many open files"))) == code


@pytest.mark.parametrize("code", [errno.ECONNREFUSED, errno.ENOBUFS, None])
def test_other_errors_are_not_a_shortage(code: int | None) -> None:
    inner = OSError(code, "x") if code is not None else OSError("no results found")
    assert descriptor_shortage(inner) is None
    assert descriptor_shortage(wrapped(inner)) is None
    assert descriptor_shortage(EOFError()) is None


def test_out_of_descriptors_reads_as_a_connection_error_naming_the_errno() -> None:
    exc = OutOfDescriptors(errno.EMFILE)
    assert isinstance(exc, ConnectionError) and exc.errno == errno.EMFILE
    assert exc.name == "EMFILE"
    assert OUT_OF_DESCRIPTORS in str(exc) and "EMFILE" in str(exc)


def test_a_real_connect_at_the_open_files_limit_is_a_shortage() -> None:
    """socket(2) at the process's limit, through trio's connect: the errno survives."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held: list[socket.socket] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]

        async def connect() -> None:
            # trio's own descriptors (its wakeup pipe, epoll) exist before the limit is cut.
            await trio.sleep(0)
            resource.setrlimit(resource.RLIMIT_NOFILE, (_lowest_free_fd(), hard))
            try:
                assert not descriptor_free(server.fileno())
                with pytest.raises(OSError) as caught:
                    held.append(await trio.open_tcp_stream("127.0.0.1", port))  # type: ignore
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            assert descriptor_shortage(caught.value) == errno.EMFILE
            assert descriptor_free(server.fileno())

        trio.run(connect)
    assert not held


def _lowest_free_fd() -> int:
    """With the soft limit here, the next socket has no number left below it."""
    probe = os.open("/dev/null", os.O_RDONLY)
    os.close(probe)
    return probe
