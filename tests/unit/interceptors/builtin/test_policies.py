"""Header policies on the produce path and the record filter on the fetch path."""

from __future__ import annotations

import pytest

from interceptors import INVALID_RECORD, ConfigError, ConnectionInfo, build_chains
from interceptors.testing import make_batch

CONN = ConnectionInfo(client_id="app")


def produce(member, *headers_per_record):
    chain = build_chains({"produce": [member]}).produce
    b = make_batch([(None, b"v", h) for h in headers_per_record])
    return chain.process("t", 0, [b], CONN), b, chain


def test_require_headers_passes_complete_records_untouched():
    outcome, b, _ = produce({"type": "require_headers", "headers": ["tenant", "trace"]},
                            [("tenant", b"a"), ("trace", None)])
    assert outcome.ok and not b.modified and not b.records_read


def test_require_headers_rejects_the_partition():
    outcome, _, chain = produce({"type": "require_headers", "headers": ["tenant"]},
                                [("tenant", b"a")], [("other", b"x")], [("tenant", b"b")])
    assert outcome.error_code == INVALID_RECORD
    assert outcome.error_message == "record lacks required header 'tenant'"
    assert outcome.record_errors == ((1, outcome.error_message),)
    assert chain.stats.members["require_headers"].records_rejected == {"missing_header": 3}


def test_require_headers_can_refuse_null_values():
    outcome, _, _ = produce({"type": "require_headers", "headers": ["t"], "allow_null": False},
                            [("t", None)])
    assert outcome.error_code == INVALID_RECORD


def test_require_headers_refuses_headerless_legacy_batches():
    chain = build_chains({"produce": [{"type": "require_headers", "headers": ["t"]}]}).produce
    assert chain.process("t", 0, [b"\x00" * 40], CONN).error_code == INVALID_RECORD


def test_require_headers_runs_after_earlier_members():
    outcome, _, _ = produce({"type": "require_headers", "headers": ["x"]}, [])
    assert not outcome.ok
    chain = build_chains({"produce": [{"type": "insert_header", "header": "x", "value": "1"},
                                      {"type": "require_headers", "headers": ["x"]}]}).produce
    assert chain.process("t", 0, [make_batch([(None, None, [])])], CONN).ok


@pytest.mark.parametrize(
    ("limits", "headers", "message"),
    [
        ({"max_count": 2}, [("a", b""), ("b", b""), ("c", b"")], "record has 3 headers (limit 2)"),
        ({"max_key_bytes": 3}, [("abcd", b"")], "header key of 4 bytes (limit 3)"),
        ({"max_key_bytes": 3}, [("äb", b"")], None),  # UTF-8 bytes, not characters
        ({"max_key_bytes": 3}, [("äbc", b"")], "header key of 4 bytes (limit 3)"),
        ({"max_total_bytes": 5}, [("ab", b"cd"), ("e", b"f")], "headers take 6 bytes (limit 5)"),
        ({"max_total_bytes": 5}, [("ab", None), ("e", b"f")], None),
    ],
)
def test_header_limits(limits, headers, message):
    outcome, _, _ = produce({"type": "header_limits", **limits}, headers)
    if message is None:
        assert outcome.ok
    else:
        assert outcome.error_code == INVALID_RECORD and outcome.error_message == message


def test_policy_config_errors():
    with pytest.raises(ConfigError, match=r"produce\[0\]: set at least one of max_count"):
        build_chains({"produce": [{"type": "header_limits"}]})
    with pytest.raises(ConfigError, match=r"produce\[0\]\.max_count: must be >= 0"):
        build_chains({"produce": [{"type": "header_limits", "max_count": -1}]})
    with pytest.raises(ConfigError, match=r"produce\[0\]\.headers: must not be empty"):
        build_chains({"produce": [{"type": "require_headers", "headers": []}]})
    with pytest.raises(ConfigError, match=r"fetch\[0\]\.type: 'require_headers' runs on the "
                                          r"produce path only"):
        build_chains({"fetch": [{"type": "require_headers", "headers": ["a"]}]})


# -- filter -------------------------------------------------------------------------------

RECORDS = [
    [("tenant", b"acme")],
    [("tenant", b"globex")],
    [],
    [("tenant", None), ("tenant", b"acme-eu")],
]


def kept(**config):
    chain = build_chains({"fetch": [{"type": "filter", "header": "tenant", **config}]}).fetch
    b = make_batch([(None, b"v", h) for h in RECORDS])
    chain.process("t", 0, [b], CONN)
    return [r.offset_delta for r in b.records]


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"present": True}, [2]),
        ({"present": False}, [0, 1, 3]),
        ({"equals": "acme"}, [1, 2, 3]),
        ({"equals": "acme", "action": "keep"}, [0]),
        ({"matches": "acme.*", "action": "keep"}, [0, 3]),
        ({"matches": "acme"}, [1, 2, 3]),  # the whole value must match
    ],
)
def test_filter(config, expected):
    assert kept(**config) == expected


def test_filter_config_errors():
    with pytest.raises(ConfigError, match=r"fetch\[0\]\.present: give exactly one of present"):
        build_chains({"fetch": [{"type": "filter", "header": "h"}]})
    with pytest.raises(ConfigError, match=r"fetch\[0\]\.matches: give exactly one"):
        build_chains({"fetch": [{"type": "filter", "header": "h", "equals": "a",
                                 "matches": "b"}]})
    with pytest.raises(ConfigError, match=r"fetch\[0\]\.matches: invalid regex"):
        build_chains({"fetch": [{"type": "filter", "header": "h", "matches": "("}]})
    with pytest.raises(ConfigError, match=r"produce\[0\]\.type: 'filter' runs on the fetch"):
        build_chains({"produce": [{"type": "filter", "header": "h", "present": True}]})
