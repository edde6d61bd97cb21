"""The audit interceptor: stamped headers, and why audit data cannot be forged."""

from __future__ import annotations

import uuid

import pytest

from interceptors import INVALID_RECORD, ConfigError, ConnectionInfo, ProxyInfo, build_chains
from interceptors.testing import make_batch

NOW = 1_700_000_000.123


def audit_chain(env=None, **config):
    env = env or ProxyInfo(instance_id="herald-7", cluster_id="clusterA", clock=lambda: NOW)
    return build_chains({"produce": [{"type": "audit", **config}]}, env).produce


def run(chain, conn, *headers_per_record):
    b = make_batch([(None, b"v", h) for h in headers_per_record])
    return b, chain.process("t", 0, [b], conn)


def stamped(record) -> dict:
    return {k: v for k, v in record.headers if k.startswith("herald.")}


def test_stamps_every_field():
    conn = ConnectionInfo(client_id="billing", address="10.1.2.3:51000", principal="User:alice")
    b, outcome = run(audit_chain(), conn, [("app", b"1")], [])
    assert outcome.ok
    first = b.records[0].headers
    assert first[0] == ("app", b"1")  # the client's own headers come first, untouched
    h = stamped(b.records[0])
    assert h == {
        "herald.client_id": b"billing",
        "herald.principal": b"User:alice",
        "herald.source": b"10.1.2.3:51000",
        "herald.proxy": b"herald-7",
        "herald.cluster": b"clusterA",
        "herald.time": b"1700000000123",
        "herald.msg_id": h["herald.msg_id"],
        "herald.origin": b"clusterA",
    }
    ids = [uuid.UUID(stamped(r)["herald.msg_id"].decode()) for r in b.records]
    assert all(i.version == 7 for i in ids) and ids[0] != ids[1]
    assert int(ids[0].hex[:12], 16) == 1700000000123  # UUIDv7: the ms timestamp leads


def test_unknown_principal_and_client_id():
    b, _ = run(audit_chain(), ConnectionInfo(), [])
    h = stamped(b.records[0])
    assert h["herald.principal"] == b"User:ANONYMOUS"
    assert h["herald.client_id"] is None and h["herald.source"] is None


def test_unknown_cluster_then_learnt():
    env = ProxyInfo(instance_id="p", clock=lambda: NOW)
    chain = audit_chain(env)
    b, _ = run(chain, ConnectionInfo(), [])
    assert stamped(b.records[0])["herald.cluster"] is None
    env.cluster_id = "late"
    b, _ = run(chain, ConnectionInfo(), [])
    assert stamped(b.records[0])["herald.cluster"] == b"late"


def test_the_stamp_follows_the_clock_the_cluster_and_the_connection():
    now = [NOW]
    env = ProxyInfo(instance_id="p", cluster_id="A", clock=lambda: now[0])
    chain = audit_chain(env)
    conn = ConnectionInfo(client_id="one")

    def stamp(conn=conn):
        b, _ = run(chain, conn, [])
        h = stamped(b.records[0])
        return h["herald.time"], h["herald.cluster"], h["herald.client_id"], h["herald.msg_id"]

    first = stamp()
    assert first[:3] == (b"1700000000123", b"A", b"one")
    assert stamp()[:3] == first[:3]  # the same millisecond: the same stamp, a new msg id
    assert stamp()[3] != first[3]
    now[0] += 0.002
    assert stamp()[0] == b"1700000000125"
    assert stamp()[3].startswith(b"018bcfe5-687d-7")  # the msg id follows the clock
    env.cluster_id = "B"
    assert stamp()[1] == b"B"
    assert stamp(ConnectionInfo(client_id="two"))[2] == b"two"


def test_selected_fields_and_prefix():
    chain = audit_chain(prefix="audit/", fields=["client_id", "msg_id"])
    b, _ = run(chain, ConnectionInfo(client_id="c"), [])
    assert [k for k, _ in b.records[0].headers] == ["audit/client_id", "audit/msg_id"]


def test_forged_headers_are_stripped_and_counted():
    chain = audit_chain()
    forged = [("herald.client_id", b"admin"), ("x", b"1"), ("herald.origin", b"fake"),
              ("herald.msg_id", b"mine")]
    b, outcome = run(chain, ConnectionInfo(client_id="app"), forged)
    assert outcome.ok
    h = b.records[0].headers
    assert h[0] == ("x", b"1")
    assert dict(h)["herald.client_id"] == b"app"
    assert dict(h)["herald.origin"] == b"clusterA"
    assert dict(h)["herald.msg_id"] != b"mine"
    assert sum(1 for k, _ in h if k.startswith("herald.")) == 8
    assert chain.stats.members["audit"].events == {"forged_stripped": 3}


def test_forged_headers_can_reject_the_partition():
    chain = audit_chain(forged="reject")
    b, outcome = run(chain, ConnectionInfo(client_id="app"), [], [("herald.principal", b"x")])
    assert outcome.error_code == INVALID_RECORD
    assert outcome.record_errors == ((1, outcome.error_message),)
    assert "herald.principal" in outcome.error_message and "reserved" in outcome.error_message
    assert chain.stats.members["audit"].records_rejected == {"forged_header": 2}


def test_trusted_mirror_keeps_message_identity_but_not_hop_data():
    chain = audit_chain(trusted={"principals": ["User:mirror"]})
    mirrored = [("herald.client_id", b"original-app"), ("herald.msg_id", b"id-1"),
                ("herald.origin", b"clusterZ"), ("herald.time", b"1")]
    mirror = ConnectionInfo(client_id="mm2", principal="User:mirror")
    b, _ = run(chain, mirror, mirrored)
    h = dict(b.records[0].headers)
    assert h["herald.msg_id"] == b"id-1"
    assert h["herald.origin"] == b"clusterZ"  # first cluster wins
    assert h["herald.client_id"] == b"mm2"  # hop data describes this hop
    assert h["herald.time"] == b"1700000000123"
    assert [k for k, _ in b.records[0].headers].count("herald.msg_id") == 1

    # the same headers from anyone else are forged
    b, _ = run(chain, ConnectionInfo(client_id="mm2", principal="User:eve"), mirrored)
    h = dict(b.records[0].headers)
    assert h["herald.origin"] == b"clusterA" and h["herald.msg_id"] != b"id-1"


def test_trusted_by_client_id():
    chain = audit_chain(trusted={"client_ids": ["prefix:mirror-"]}, forged="reject")
    b, outcome = run(chain, ConnectionInfo(client_id="mirror-1"), [("herald.origin", b"Z")])
    assert outcome.ok and dict(b.records[0].headers)["herald.origin"] == b"Z"


def test_refuses_legacy_batches():
    outcome = audit_chain().process("t", 0, [b"\x00" * 40], ConnectionInfo())
    assert outcome.error_code == INVALID_RECORD


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"prefix": ""}, r"produce\[0\]\.prefix: must not be empty"),
        ({"fields": ["client_id", "nope"]}, r"produce\[0\]\.fields\[1\]: unknown field 'nope'"),
        ({"forged": "ignore"}, r"produce\[0\]\.forged: expected one of strip, reject"),
        ({"trusted": {"users": []}}, r"produce\[0\]\.trusted\.users: unknown key"),
        ({"trusted": {"principals": ["regex:("]}},
         r"produce\[0\]\.trusted\.principals\[0\]: invalid regex"),
    ],
)
def test_config_errors(config, message):
    with pytest.raises(ConfigError, match=message):
        audit_chain(**config)
