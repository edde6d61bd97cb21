"""`proxy/native/path_choice.py`: the one place that decides which path runs, from what the
engine says it can do, restating none of it; and what it decides."""

from __future__ import annotations

import ast
import dataclasses
import math
import socket
import ssl
import struct
from pathlib import Path

import trio

from interceptors import build_chains
from protocol.api_keys import ApiKey
from protocol.contracts import native_relay
from proxy.config.proxy_yaml import parse_config
from proxy.filters import share_drops
from proxy.filters.address_rewrite import AddressRewriter
from proxy.filters.api_versions import ApiVersionsNegotiator
from proxy.filters.chain import FilterChain, SessionContext
from proxy.filters.interception import InterceptorFilter
from proxy.limits.connection_guard import LIMITS
from proxy.limits.memory_budget import Holder, MemoryBudget
from proxy.native import fetch_plan, path_choice, relay, stamp_plan
from proxy.native.capabilities import CAPABILITIES, Capabilities
from proxy.net.transport import PlainTransport, TlsTransport
from proxy.observability.metrics import Metrics
from proxy.upstream.brokers import BrokerDirectory
from proxy.upstream.topic_ids import TopicIds
from tests.support.native_parts import native_module

_relay = native_module("proxy.native._relay")

ROOT = Path(__file__).resolve().parents[4]
CONFIG = parse_config({"upstream": {"bootstrap": "127.0.0.1:9092"},
                       "listen": {"bootstrap": "127.0.0.1:0"}})


def _chain() -> FilterChain:
    return FilterChain([ApiVersionsNegotiator(), AddressRewriter(BrokerDirectory(CONFIG.listen))])


def _python_sources() -> list[Path]:
    return sorted([*(ROOT / "proxy" / "native").glob("*.py"),
                   *(ROOT / "proxy" / "session").glob("*.py"), ROOT / "proxy" / "server.py"])


def test_the_facts_are_the_engines() -> None:
    said = _relay.capabilities()
    assert CAPABILITIES.available
    assert (relay.MAX_API, relay.MAX_VERSION) == (_relay.MAX_API, _relay.MAX_VERSION) == (
        said["max_api"], said["max_version"])
    first, last = said["stamp"]["versions"]
    assert stamp_plan.VERSIONS == range(first, last + 1)
    first, last = said["scan"]["versions"]
    assert fetch_plan.VERSIONS == range(first, last + 1)
    assert stamp_plan.PRODUCE == said["stamp"]["api"] and fetch_plan.FETCH == said["scan"]["api"]
    first, last = said["scan"]["share_versions"]
    assert fetch_plan.SHARE_VERSIONS == range(first, last + 1)
    assert fetch_plan.SHARE_FETCH == said["scan"]["share_api"]
    values = said["table_values"]
    for name in values:
        assert getattr(path_choice, name.upper()) == values.index(name)
    # The reasons Python tells apart are the engine's, of the kind it handles them as.
    for reason in path_choice.ENGINE_REASONS_NAMED:
        assert said["reasons"][reason] == native_relay.RESUME
    # Deadlines end a session as the limits of the same name do.
    deadlines = {r for r, kind in said["reasons"].items() if kind == native_relay.DEADLINE}
    assert deadlines and deadlines <= set(LIMITS)
    assert set(said["reasons"].values()) <= {native_relay.RESUME, native_relay.DEADLINE,
                                             native_relay.UPSTREAM, native_relay.CLOSE}
    # The column kinds it makes are the interceptor API's, which a member names.
    from interceptors.api import NATIVE_KINDS
    assert set(said["stamp"]["columns"]) == set(NATIVE_KINDS)


def _restated(source: str, name: str, allowed: set[str]) -> list[str]:
    """Literal version ranges and engine reason names (but `allowed`) in `source`."""
    reasons = set(_relay.capabilities()["reasons"]) - allowed - {"response", "drain"}
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "range" and node.args
                and all(isinstance(a, ast.Constant) for a in node.args)
                and [a.value for a in node.args] != [0]):  # the empty range is no fact
            found.append(f"{name}:{node.lineno}: range of literals")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                node.value in reasons):
            found.append(f"{name}:{node.lineno}: reason {node.value!r}")
    return found


def test_python_restates_no_version_range_or_reason_set() -> None:
    """No module that decides or runs a path writes a literal range of versions, or the
    names of the engine's hand-over reasons (other than those path_choice tells apart;
    "response" and "drain" are words too common to tell)."""
    found = []
    for path in _python_sources():
        allowed = set(path_choice.ENGINE_REASONS_NAMED) if path.name == "path_choice.py" else set()
        found += _restated(path.read_text(), path.name, allowed)
    assert found == []


def test_the_check_finds_what_it_looks_for() -> None:
    """What the modules held before the capability table: found."""
    source = ("RESUME = frozenset({'request', 'client_eof'})\n"
              "VERSIONS = range(3, 14)\n")
    assert len(_restated(source, "old.py", set())) == 3


def test_which_engine_and_which_sessions() -> None:
    assert path_choice.engine_reason("off") == path_choice.NATIVE_RELAY_OFF
    assert path_choice.engine_reason("auto") is None
    assert path_choice.engine_reason("auto", Capabilities(available=False)) == (
        path_choice.NATIVE_UNAVAILABLE)
    assert path_choice.session_reason(None, False, False) is None
    assert path_choice.session_reason("native_relay_off", False, False) == "native_relay_off"
    no_tls = dataclasses.replace(CAPABILITIES, tls=False)
    with_tls = dataclasses.replace(CAPABILITIES, tls=True)
    assert path_choice.session_reason(None, True, False, no_tls) == path_choice.TLS_CLIENT
    assert path_choice.session_reason(None, False, True, no_tls) == path_choice.TLS_UPSTREAM
    assert path_choice.session_reason(None, True, True, with_tls) is None


def test_the_table_follows_what_the_engine_says() -> None:
    chain = _chain()
    produce, fetch = int(ApiKey.PRODUCE), int(ApiKey.FETCH)
    table = path_choice.passable_table(chain)
    at = CAPABILITIES.max_version
    assert table[produce * at + 11] == path_choice.UNLESS_TAGGED
    assert table[fetch * at + 17] == path_choice.UNLESS_TAGGED
    # An engine that reads no response tags: the address rewriter's pairs are Python's.
    blind = dataclasses.replace(CAPABILITIES, tags={})
    table = path_choice.passable_table(chain, caps=blind)
    assert table[produce * at + 11] == path_choice.PYTHON
    assert table[fetch * at + 17] == path_choice.PYTHON
    assert table[produce * at + 9] == path_choice.PASS


def test_frames_handled_in_python_are_counted_with_why() -> None:
    metrics = Metrics()

    def counted(scope: str, reason: str, api: str) -> float:
        value = metrics.registry.get_sample_value(
            "herald_python_path_total", {"scope": scope, "reason": reason, "api": api})
        return value or 0.0

    whole = path_choice.SessionPath(metrics, path_choice.TLS_CLIENT, _chain())
    whole.frame(int(ApiKey.PRODUCE), 9)
    assert counted("session", "tls_client", "") == 1
    assert counted("frame", "tls_client", "Produce") == 1

    path = path_choice.SessionPath(metrics, None, _chain())
    assert counted("session", "filter", "") == 0
    path.frame(int(ApiKey.HEARTBEAT), 4)  # before the first phase
    assert counted("frame", "between_phases", "Heartbeat") == 1
    path._table = path_choice.passable_table(_chain())  # as a phase sets it
    path.frame(int(ApiKey.METADATA), 12)  # the address rewriter reads it
    assert counted("frame", "filter", "Metadata") == 1
    assert path.ended("request", 3) == native_relay.RESUME
    path.frame(int(ApiKey.PRODUCE), 9)  # the engine would pass it: it declined this one
    path.frame(int(ApiKey.PRODUCE), 9)  # and this one came before the session went back
    assert counted("frame", "engine_declined", "Produce") == 1
    assert counted("frame", "between_phases", "Produce") == 1
    assert path.ended("upstream_closed", 3) == native_relay.UPSTREAM
    assert path.ended("idle_timeout", 3) == native_relay.DEADLINE


def test_reauthentication_bounds_a_native_phase() -> None:
    path = path_choice.SessionPath(Metrics(), None, _chain())
    assert path.handover_s(math.inf, 10.0) == 0.0  # no deadline
    assert path.handover_s(25.0, 10.0) == 15.0
    assert path.handover_s(10.0, 10.0) is None  # due: no phase begins
    assert path._why == path_choice.REAUTH


def test_a_session_that_keeps_needing_python_stays_a_few_reads() -> None:
    path = path_choice.SessionPath(Metrics(), None, _chain())
    path.ended("request", 0)  # a phase that passed nothing
    assert not path.may_offer(0, 1024)
    assert path.may_offer(0, 1024)
    path.ended("request", 0)
    assert [path.may_offer(0, 1024) for _ in range(3)] == [False, False, True]
    path.ended("request", 100)  # a long phase: back at once
    assert path.may_offer(0, 1024)
    assert not path.may_offer(2048, 1024)  # a partial frame larger than the engine's buffer


def test_phases_the_data_path_did_not_end_keep_no_session_in_python() -> None:
    """The login, metadata and group coordination end short phases by design: the session
    goes back once they are answered. Only a short phase that a Produce or Fetch (or its
    response) ended makes it stay, the count going on from where the data path left it."""
    path = path_choice.SessionPath(Metrics(), None, _chain())
    for api in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.METADATA,
                ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP):
        path.ended("request", 0, int(api))
        assert path.may_offer(0, 1024), api
    path.ended("response", 1, int(ApiKey.FETCH))  # a Fetch response Python must handle
    assert [path.may_offer(0, 1024) for _ in range(2)] == [False, True]
    path.ended("request", 0, int(ApiKey.METADATA))
    assert path.may_offer(0, 1024)
    path.ended("request", 2, int(ApiKey.PRODUCE))  # the second short one of the data path
    assert [path.may_offer(0, 1024) for _ in range(3)] == [False, False, True]
    for reason in ("client_eof", "reauth", "drain"):  # no frame of the data path ended these
        path.ended(reason, 0)
        assert path.may_offer(0, 1024), reason
    path.ended("request", 0)  # a frame too short to name: counted as the data path's
    assert [path.may_offer(0, 1024) for _ in range(5)] == [False] * 4 + [True]


def test_a_partial_frame_the_engine_would_hand_straight_back_stays_in_python() -> None:
    """A partial request of an API Python handles goes back to the engine only to be handed
    over again at once: the session keeps it until it is whole, however the phase ended."""
    path = path_choice.SessionPath(Metrics(), None, _chain())
    path._table = path_choice.passable_table(_chain())  # as a phase sets it
    assert path.ended("request", 0, int(ApiKey.API_VERSIONS)) == native_relay.RESUME
    api_versions = struct.pack(">ihh", 1 << 20, int(ApiKey.API_VERSIONS), 3)
    produce = struct.pack(">ihh", 1 << 20, int(ApiKey.PRODUCE), 9)
    assert not path.may_offer(len(api_versions), 1024, api_versions)
    assert path.may_offer(len(produce), 1024, produce)
    assert path.may_offer(3, 1024, api_versions[:3])  # too little to tell: the engine reads it


def test_a_full_memory_budget_keeps_the_session_in_python() -> None:
    metrics = Metrics()
    engine = relay.NativeRelay(metrics)
    try:
        chain = _chain()
        ctx = SessionContext(client_address="app", listener="bootstrap", upstream_address="b")
        path = path_choice.SessionPath(metrics, None, chain)
        roomy = Holder(MemoryBudget(64 << 20))
        phase = path.phase(engine, chain, ctx, roomy, relay.BUFFER_SIZE)
        assert phase is not None and phase.booked == 2 * relay.BUFFER_SIZE
        assert phase.table == path_choice.passable_table(chain)
        tight = Holder(MemoryBudget(relay.BUFFER_SIZE, reserve=0))
        assert path.phase(engine, chain, ctx, tight, relay.BUFFER_SIZE) is None
        path.frame(int(ApiKey.HEARTBEAT), 4)
        assert metrics.registry.get_sample_value("herald_python_path_total", {
            "scope": "frame", "reason": "memory_budget", "api": "Heartbeat"}) == 1
    finally:
        engine.close()


def _share_chain(fetch: list[dict]) -> FilterChain:
    return FilterChain([*_chain().filters,
                        InterceptorFilter(build_chains({"fetch": fetch}), TopicIds())])


def test_share_fetch_is_scanned_where_fetch_is_and_share_acknowledge_stays_python() -> None:
    """With a fetch plan, ShareFetch v1-v2 (requests and responses) go through the engine, its
    node endpoints read by the scan; v0 (early access) and ShareAcknowledge (whose node
    endpoints the engine does not read) stay Python's, and a chain the engine cannot scan
    keeps ShareFetch in Python, counted as the fetch chain's."""
    at = CAPABILITIES.max_version
    share, ack = int(ApiKey.SHARE_FETCH), int(ApiKey.SHARE_ACKNOWLEDGE)
    scannable = _share_chain([{"type": "drop_headers", "headers": ["secret"]}])
    table = path_choice.passable_table(scannable, fetch=True)
    assert [table[share * at + v] for v in range(4)] == [
        path_choice.PYTHON, path_choice.SCAN_UNLESS_TAGGED, path_choice.SCAN_UNLESS_TAGGED,
        path_choice.PYTHON]
    assert table[ack * at + 1] == path_choice.PYTHON
    assert path_choice.table_reason(scannable, ack, 1) == path_choice.FILTER
    filtering = _share_chain([{"type": "filter", "header": "tier", "equals": "hidden"}])
    assert fetch_plan.fetch_plan(filtering) is None
    table = path_choice.passable_table(filtering)
    assert table[share * at + 1] == path_choice.PYTHON
    assert path_choice.table_reason(filtering, share, 1) == path_choice.FETCH_CHAIN


def test_a_session_that_owes_share_acknowledgements_stays_in_python() -> None:
    """Gaps Herald owes the broker for records the chain dropped go in the session's next
    ShareFetch or ShareAcknowledge, which only Python writes: no native phase until then."""
    metrics = Metrics()
    engine = relay.NativeRelay(metrics)
    try:
        chain = _share_chain([{"type": "drop_headers", "headers": ["secret"]}])
        ctx = SessionContext(client_address="app", listener="bootstrap", upstream_address="b")
        path = path_choice.SessionPath(metrics, None, chain)
        roomy = Holder(MemoryBudget(64 << 20))
        assert path.phase(engine, chain, ctx, roomy, relay.BUFFER_SIZE) is not None
        path.ended("response", 3, int(ApiKey.SHARE_FETCH))  # Python drops a record
        share_drops.pending(ctx.attributes).add(b"\x01" * 16, 0, {5})
        assert path.phase(engine, chain, ctx, roomy, relay.BUFFER_SIZE) is None
        path.frame(int(ApiKey.SHARE_FETCH), 1)
        assert metrics.registry.get_sample_value("herald_python_path_total", {
            "scope": "frame", "reason": "owed", "api": "ShareFetch"}) == 1
        share_drops.pending(ctx.attributes).offsets.clear()  # carried
        phase = path.phase(engine, chain, ctx, roomy, relay.BUFFER_SIZE)
        assert phase is not None and phase.fetch is not None
    finally:
        engine.close()


async def test_a_session_whose_tls_the_engine_refuses_is_counted_as_refused() -> None:
    """A TLS side with no connection left to give the engine (closed) keeps the session in
    Python; what Python handles then is counted as `tls_refused`, not `between_phases`."""
    metrics = Metrics()

    def counted(reason: str, api: str) -> float:
        value = metrics.registry.get_sample_value(
            "herald_python_path_total", {"scope": "frame", "reason": reason, "api": api})
        return value or 0.0

    left, right = socket.socketpair()
    with right:
        tls = TlsTransport(trio.SocketStream(trio.socket.from_stdlib_socket(left)),
                           ssl.create_default_context(), server_side=False,
                           server_hostname="broker")
        tls.sock.close()  # the ssl module's connection object is gone with it
        plain = PlainTransport(trio.SocketStream(trio.socket.from_stdlib_socket(right.dup())))
        path = path_choice.SessionPath(metrics, None, _chain())
        assert path.engine_tls(tls, plain) == (None, None)
        assert path.refused
        assert not path.may_offer(0, 1024)  # never offered to the engine again
        path.frame(int(ApiKey.HEARTBEAT), 4)
        assert counted("tls_refused", "Heartbeat") == 1
        assert counted("between_phases", "Heartbeat") == 0
        plain.sock.close()

    # The engine refusing the TLS connection when offered counts the same way.
    path = path_choice.SessionPath(metrics, None, _chain())
    path._table = path_choice.passable_table(_chain())  # as a phase sets it
    path.ended("request", 100)
    path.frame(int(ApiKey.PRODUCE), 9)
    path.tls_refused()
    path.frame(int(ApiKey.PRODUCE), 9)
    assert counted("engine_declined", "Produce") == 1
    assert counted("tls_refused", "Produce") == 1
    assert path_choice.TLS_REFUSED in path_choice.FRAME_REASONS
