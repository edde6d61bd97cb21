"""Which consumer group a client reads for, as the proxy learned it from the group requests.

A Fetch request names no group, but the same client also speaks the group protocol: JoinGroup,
SyncGroup, Heartbeat, OffsetCommit, OffsetFetch and LeaveGroup (classic groups) and
ConsumerGroupHeartbeat (KIP-848) all carry the group id, usually on another connection (to the
group coordinator) than its fetches. What ties them together is the client: its source host
and its client id. The proxy's learner (`proxy.filters.group_learner`) records (host, client id) →
group here, and hands the map to the members that use it (`interceptors.services.
CONSUMER_GROUPS`, as `ProxyInfo.groups`): `fetch_log` looks its fetching clients up and stamps
the group on what it publishes. A client that never spoke the group protocol (`assign()`
without committing) has no entry: it reads without a group.

Client ids and group ids are client input, so the directory is bounded: at most `capacity`
entries, the least recently confirmed one evicted first, and an entry not confirmed for `ttl_s`
(a member heartbeats every few seconds while it is in its group) is no longer believed. Ids
longer than `MAX_ID` characters are not learned at all.

Two consumers of different groups that share a host and a client id cannot be told apart by
their fetches; the group most recently confirmed wins. The Java consumer's default client id
(``consumer-<group>-<n>``) is distinct per consumer; librdkafka's (``rdkafka``) is not, so
applications that read for several groups from one host should set `client.id`.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

CAPACITY = 10_000
TTL_S = 300.0
MAX_ID = 1024


def source_host(address: str) -> str:
    """``host`` of ``host:port`` (``[v6]`` of ``[v6]:port``): a client's connections to
    different brokers share it, never the port."""
    host, sep, _port = address.rpartition(":")
    return host if sep else address


class ConsumerGroups:
    """A bounded map (source host, client id) → group id, safe to read from worker threads
    (the fetch chain may run there) while the event loop writes; members read it as an
    `interceptors.services.GroupDirectory`."""

    def __init__(self, capacity: int = CAPACITY, ttl_s: float = TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = capacity
        self.ttl_s = ttl_s
        self.clock = clock
        self._entries: OrderedDict[tuple[str, str], tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._entries)

    def learn(self, address: str, client_id: str | None, group: str) -> None:
        """`client_id` at `address` spoke for `group` just now."""
        if not client_id or not group or len(client_id) > MAX_ID or len(group) > MAX_ID:
            return
        key = (source_host(address), client_id)
        now = self.clock()
        with self._lock:
            self._entries[key] = (group, now)
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
                self.evicted += 1

    def forget(self, address: str, client_id: str | None, group: str) -> None:
        """`client_id` left `group`: its later fetches (if any) are read without it."""
        if not client_id:
            return
        key = (source_host(address), client_id)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] == group:
                del self._entries[key]

    def group_of(self, address: str, client_id: str | None) -> str | None:
        """The group `client_id` at `address` reads for, or None (no group, or not known)."""
        if not client_id:
            return None
        entry = self._entries.get((source_host(address), client_id))
        if entry is None or self.clock() - entry[1] > self.ttl_s:
            return None
        return entry[0]
