"""The routing journal: what `sequences.SequenceMap` knows, kept in a file so that a Herald
process that dies (SIGKILL, OOM, a crash) and is started again knows it too.

Without it, a restarted Herald does not know how far an idempotent producer's sequences were
shifted, and refuses the producer's next batch (UNKNOWN_PRODUCER_ID): librdkafka gives the
producer up, the Java client bumps its epoch and writes the batch that was in flight again.
With it, the client's retry reaches a Herald that remembers the batch: its kept records go
upstream under the same sequence (the broker recognises the duplicate) and its moved records
are not routed again when their delivery was journaled.

What is written, in this order, so that the file never claims more than happened:

* an `attempt` before anything of a batch leaves Herald (its routed records are handed to a
  producer, its kept ones forwarded upstream): the client's base sequence and count, how many
  records stay, and the upstream base sequence they carry;
* a `delivered` when a destination acknowledged every record a rule sent it from that batch.

Why an old journal is not trusted wrongly: a producer epoch's state lives in one Herald
only. Any other Herald (or this one without its journal) refuses that epoch's batches after its
first, and the producer bumps its epoch; so a journal that missed some time can only hold
epochs its producers have left. What would break that, a journal that misses entries while the
same process goes on, cannot happen: a journal that fails is removed (`remembered.py`).

One gap is left, and said: a Herald killed between a destination's acknowledgement and the
`delivered` line (the time of one callback) routes those records again on the retry.

The file is an append-only sequence of entries, each `length:u32 crc32c:u32 payload`; a torn
last entry (a write the process did not finish) is where reading stops, and nothing of that
batch had left yet. Its first entry names the primary cluster: a journal of another cluster
(producer ids are per cluster) is set aside, not replayed. When the file has grown to twice
what a snapshot of the live state takes, it is rewritten as that snapshot (a new file renamed
over the old one). Writes are not fsynced: the page cache outlives a process, not a machine;
a lost node loses its pod's volume anyway.

Encoding and decoding are pure functions of bytes; `JournalFile` does the file I/O.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from crc32c import crc32c

from proxy.observability.logs import get_logger

log = get_logger("routing")

MAGIC = b"HRJ1"
HEADER = 1  # payload: magic, the primary cluster's id
ATTEMPT = 2
DELIVERED = 3
STATE = 4  # a snapshot's line per producer partition: its epoch, next base and shift

_FRAME = struct.Struct(">II")
_KEY = struct.Struct(">qhi")  # producer id, epoch, partition
_ATTEMPT = struct.Struct(">iiii")  # base, count, kept, upstream base
_STATE = struct.Struct(">ii")  # next base, shift
_BASE = struct.Struct(">i")
_LEN = struct.Struct(">H")
MIN_COMPACT_BYTES = 4 << 20
_YIELD_EVERY = 256  # entries a snapshot's encoding takes between two yields of the interpreter


class JournalError(Exception):
    """The journal cannot be used (a bad path, another Herald holds it, a failed write)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One line of the journal. Fields a kind does not use are left at their defaults."""

    kind: int
    producer_id: int = 0
    epoch: int = 0
    topic: str = ""
    partition: int = 0
    base: int = 0  # ATTEMPT, DELIVERED: the client's base sequence; STATE: the next one
    count: int = 0
    kept: int = 0
    upstream_base: int = 0
    shift: int = 0
    text: str = ""  # HEADER: the cluster id; DELIVERED: the rule's name


def _text(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > 0xFFFF:
        raise ValueError("journal text longer than 65535 bytes")
    return _LEN.pack(len(raw)) + raw


def encode(entry: Entry) -> bytes:
    """One framed entry."""
    kind = entry.kind
    if kind == HEADER:
        payload = bytes([HEADER]) + MAGIC + _text(entry.text)
    else:
        head = bytes([kind]) + _KEY.pack(entry.producer_id, entry.epoch, entry.partition)
        if kind == ATTEMPT:
            body = _ATTEMPT.pack(entry.base, entry.count, entry.kept, entry.upstream_base)
        elif kind == DELIVERED:
            body = _BASE.pack(entry.base) + _text(entry.text)
        elif kind == STATE:
            body = _STATE.pack(entry.base, entry.shift)
        else:
            raise ValueError(f"unknown journal entry kind {kind}")
        payload = head + body + _text(entry.topic)
    return _FRAME.pack(len(payload), crc32c(payload)) + payload


def decode(data: bytes) -> tuple[list[Entry], int]:
    """The entries of a journal's bytes, and how many bytes they span: reading stops at the
    first entry that is cut short or does not match its checksum (a write that did not
    finish)."""
    view = memoryview(data)
    entries = []
    at = 0
    while at + _FRAME.size <= len(data):
        length, crc = _FRAME.unpack_from(view, at)
        start = at + _FRAME.size
        payload = bytes(view[start:start + length])
        if len(payload) != length or crc32c(payload) != crc:
            break
        try:
            entries.append(_payload(payload))
        except (struct.error, ValueError, IndexError, UnicodeDecodeError):
            break
        at = start + length
    return entries, at


def _read_text(payload: bytes, at: int) -> tuple[str, int]:
    (n,) = _LEN.unpack_from(payload, at)
    at += _LEN.size
    raw = payload[at:at + n]
    if len(raw) != n:
        raise ValueError("journal text cut short")
    return raw.decode(), at + n


def _payload(payload: bytes) -> Entry:
    kind = payload[0]
    if kind == HEADER:
        if payload[1:5] != MAGIC:
            raise ValueError("not a routing journal")
        cluster, end = _read_text(payload, 5)
        _done(payload, end)
        return Entry(HEADER, text=cluster)
    pid, epoch, partition = _KEY.unpack_from(payload, 1)
    at = 1 + _KEY.size
    if kind == ATTEMPT:
        base, count, kept, upstream = _ATTEMPT.unpack_from(payload, at)
        topic, end = _read_text(payload, at + _ATTEMPT.size)
        entry = Entry(ATTEMPT, pid, epoch, topic, partition, base, count, kept, upstream)
    elif kind == DELIVERED:
        (base,) = _BASE.unpack_from(payload, at)
        rule, at = _read_text(payload, at + _BASE.size)
        topic, end = _read_text(payload, at)
        entry = Entry(DELIVERED, pid, epoch, topic, partition, base, text=rule)
    elif kind == STATE:
        next_base, shift = _STATE.unpack_from(payload, at)
        topic, end = _read_text(payload, at + _STATE.size)
        entry = Entry(STATE, pid, epoch, topic, partition, next_base, shift=shift)
    else:
        raise ValueError(f"unknown journal entry kind {kind}")
    _done(payload, end)
    return entry


def _done(payload: bytes, end: int) -> None:
    if end != len(payload):
        raise ValueError("journal entry longer than its fields")


@dataclass(frozen=True, slots=True)
class Replay:
    """What a journal file held for the cluster asked about."""

    entries: list[Entry]
    note: str  # "" when it was read whole; otherwise why something was set aside


def replay(data: bytes, cluster_id: str) -> Replay:
    """The entries to restore from a journal's bytes, for this primary cluster."""
    if not data:
        return Replay([], "")
    entries, used = decode(data)
    if not entries or entries[0].kind != HEADER:
        return Replay([], "not a routing journal: set aside")
    if entries[0].text != cluster_id:
        return Replay([], f"written for cluster {entries[0].text!r}, not {cluster_id!r}: "
                          "set aside")
    note = "" if used == len(data) else f"the last {len(data) - used} bytes were cut short"
    return Replay(entries[1:], note)


class JournalFile:
    """The journal on disk: locked for this process, appended to, and rewritten as a snapshot
    when it has grown enough.

    Any OSError of a write makes the journal unusable: the file is removed (a journal that
    missed an entry would make the next Herald confident and wrong) and `JournalError` is
    raised; the caller goes on without one.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1
        self._size = 0
        self._compact_at = MIN_COMPACT_BYTES

    def open(self) -> bytes:
        """Lock the file (creating its directory) and return what it holds."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise JournalError(f"cannot open {self.path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise JournalError(f"{self.path} is held by another Herald process; give each "
                                   "its own (routing.journal)") from None
            raise JournalError(f"cannot lock {self.path}: {exc.strerror or exc}") from None
        self._fd = fd
        try:
            with os.fdopen(os.dup(fd), "rb") as f:
                return f.read()
        except OSError as exc:
            self.close()
            raise JournalError(f"cannot read {self.path}: {exc.strerror or exc}") from None

    @property
    def size(self) -> int:
        return self._size

    def rewrite(self, entries: Iterable[Entry]) -> None:
        """Replace the file with these entries (a snapshot), atomically."""
        self.install(self.prepare(entries), b"")

    @property
    def _tmp(self) -> Path:
        return self.path.with_name(self.path.name + ".new")

    def prepare(self, entries: Iterable[Entry]) -> tuple[int, int]:
        """Write a snapshot to the file that will replace this one: (its descriptor, its
        size). Touches nothing the appends use, so it may run in a worker thread.

        A worker thread encoding in Python holds the interpreter until the event loop's
        thread has waited a switch interval (5 ms) for it, at every wakeup of the loop: so
        the encoding lets it go every `_YIELD_EVERY` entries (well under a millisecond)."""
        chunks = []
        for n, entry in enumerate(entries, 1):
            chunks.append(encode(entry))
            if n % _YIELD_EVERY == 0:
                time.sleep(0)
        data = b"".join(chunks)
        fd = -1
        try:
            fd = os.open(self._tmp,
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC,
                         0o600)
            _write_all(fd, data)
        except OSError as exc:
            self.discard((fd, 0))
            raise JournalError(f"cannot rewrite {self.path}: {exc.strerror or exc}") from None
        return fd, len(data)

    def install(self, prepared: tuple[int, int], tail: bytes) -> None:
        """Put a prepared snapshot in this file's place, with `tail` (the entries appended
        since the snapshot was taken) after it. The new file is locked, then renamed over
        the old one through the descriptor that goes on appending to it: the lock never
        lapses."""
        fd, size = prepared
        try:
            _write_all(fd, tail)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.replace(self._tmp, self.path)
        except OSError as exc:
            self.discard(prepared)
            self._fail(f"cannot rewrite {self.path}: {exc.strerror or exc}")
        old, self._fd = self._fd, fd
        if old >= 0:
            os.close(old)
        self._size = size + len(tail)
        self._compact_at = max(MIN_COMPACT_BYTES, 2 * self._size)

    def discard(self, prepared: tuple[int, int]) -> None:
        """Drop a prepared snapshot that will not be installed."""
        if prepared[0] >= 0:
            with contextlib.suppress(OSError):
                os.close(prepared[0])
        with contextlib.suppress(OSError):
            os.unlink(self._tmp)

    def append(self, data: bytes) -> bool:
        """Append framed entries; True when the file has grown enough to be rewritten."""
        try:
            _write_all(self._fd, data)
        except OSError as exc:
            self._fail(f"cannot write {self.path}: {exc.strerror or exc}")
        self._size += len(data)
        return self._size >= self._compact_at

    def _fail(self, message: str) -> NoReturn:
        problem = self.remove()
        raise JournalError(message + (f"; and cannot remove it ({problem}): delete it before "
                                      "the next start" if problem else ""))

    def remove(self) -> str:
        """Delete the file and let it go; what stopped the deletion, if anything."""
        problem = ""
        if self._fd >= 0:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                problem = str(exc.strerror or exc)
                log.error("routing_journal_not_removed", path=str(self.path), error=problem,
                          note="delete it before Herald starts again")
        self.close()
        return problem

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def with_header(cluster_id: str, entries: Iterable[Entry]) -> Iterator[Entry]:
    yield Entry(HEADER, text=cluster_id)
    yield from entries
