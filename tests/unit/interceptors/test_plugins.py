"""Plugins found through the ``herald.interceptors`` entry-point group.

Each test installs a tiny distribution the way pip would (a module plus a ``.dist-info`` with
``entry_points.txt``) into a temporary directory and puts that directory on sys.path.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

from interceptors import ConfigError, ConnectionInfo, build_chains
from interceptors.plugins import Registry, discover
from interceptors.testing import make_batch

PLUGIN = '''
from dataclasses import dataclass

from interceptors import Interceptor, PerRecord, Stamps


@dataclass
class TenantConfig:
    tenant: str
    header: str = "tenant"

    def __post_init__(self):
        from interceptors import InvalidConfig
        if not self.tenant.isidentifier():
            raise InvalidConfig("tenant", "must be an identifier")


class TenantTag(Interceptor):
    Config = TenantConfig

    def __init__(self, config, env):
        super().__init__(config, env)
        self._value = config.tenant.encode()

    def on_record(self, ctx, headers):
        headers.set(self.config.header, self._value)
        self.stats.count("tagged")


@dataclass
class StampConfig:
    tenant: str


class StampTag(Interceptor):
    """A stamping plugin: appends tenant and a request number to records without a tenant
    header; records that carry one keep it and get the number only."""

    Config = StampConfig
    concurrent = True

    def __init__(self, config, env):
        super().__init__(config, env)
        self.stamps = Stamps(("tenant", "req"), watches=frozenset({"tenant"}))
        self._columns = [config.tenant.encode(), PerRecord(self._one, self._many)]

    def on_batch(self, ctx):
        ctx.memo[self] = iter(range(1_000_000))

    def columns(self, ctx):
        return self._columns

    def _one(self, ctx):
        return b"%d" % next(ctx.memo[self])

    def _many(self, ctx, n):
        self.stats.count("bulk")
        return [self._one(ctx) for _ in range(n)]

    def on_record(self, ctx, headers):
        self.stats.count("kept")
        headers.add("req", self._one(ctx))


class StampsNoColumns(Interceptor):
    def __init__(self, config, env):
        super().__init__(config, env)
        self.stamps = Stamps(("a",))

    def on_record(self, ctx, headers):
        return None


class NotAnInterceptor:
    pass


class NoConfigDataclass(Interceptor):
    Config = dict

    def on_record(self, ctx, headers):
        return None
'''


def install(tmp_path: Path, monkeypatch, name: str, entry_points: str, module: str) -> None:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / f"{name}.py").write_text(textwrap.dedent(module))
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()


@pytest.fixture
def tenant_plugin(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, "herald_tenant_plugin", """
        [herald.interceptors]
        tenant_tag = herald_tenant_plugin:TenantTag
        stamp_tag = herald_tenant_plugin:StampTag
        stamps_no_columns = herald_tenant_plugin:StampsNoColumns
        not_interceptor = herald_tenant_plugin:NotAnInterceptor
        bad_config = herald_tenant_plugin:NoConfigDataclass
        missing = herald_tenant_plugin:DoesNotExist
        broken = herald_no_such_module:Thing
        audit = herald_tenant_plugin:TenantTag
    """, PLUGIN)
    yield
    sys.modules.pop("herald_tenant_plugin", None)


def test_plugin_is_discovered_configured_and_run(tenant_plugin):
    chains = build_chains({"produce": [{"type": "tenant_tag", "tenant": "acme",
                                        "topics": ["prefix:acme."]}]})
    b = make_batch([(None, b"v", [])])
    assert chains.produce.process("acme.orders", 0, [b], ConnectionInfo()).ok
    assert b.records[0].headers == [("tenant", b"acme")]
    assert chains.produce.stats.members["tenant_tag"].events == {"tagged": 1}


def test_plugin_config_is_validated_like_a_builtin(tenant_plugin):
    with pytest.raises(ConfigError, match=r"produce\[0\]\.tenant: required"):
        build_chains({"produce": [{"type": "tenant_tag"}]})
    with pytest.raises(ConfigError, match=r"produce\[0\]\.tenant: must be an identifier"):
        build_chains({"produce": [{"type": "tenant_tag", "tenant": "a b"}]})
    with pytest.raises(ConfigError, match=r"produce\[0\]\.colour: unknown key"):
        build_chains({"produce": [{"type": "tenant_tag", "tenant": "a", "colour": "red"}]})


@pytest.mark.parametrize(
    ("type_name", "message"),
    [
        ("not_interceptor", "is not a subclass of interceptors.Interceptor"),
        ("bad_config", "Config must be a dataclass"),
        ("missing", "failed to load: AttributeError"),
        ("broken", "failed to load: ModuleNotFoundError"),
    ],
)
def test_bad_plugins_fail_the_config_check_with_the_reason(tenant_plugin, type_name, message):
    with pytest.raises(ConfigError) as info:
        build_chains({"produce": [{"type": type_name}]})
    text = str(info.value)
    assert text.startswith("interceptors.produce[0].type: plugin ") and message in text


def test_unused_broken_plugins_do_not_matter_and_builtins_win(tenant_plugin, caplog):
    names = Registry().names()
    assert "tenant_tag" in names and "broken" in names
    assert "audit" not in discover()  # a plugin cannot replace a built-in
    assert "is a built-in interceptor" in caplog.text
    chains = build_chains({"produce": [{"type": "audit"}]})
    assert type(chains.produce.members[0].interceptor).__name__ == "Audit"


def test_unknown_type_lists_plugins_too(tenant_plugin):
    with pytest.raises(ConfigError, match=r"unknown interceptor 'nope' \(known: .*tenant_tag"):
        build_chains({"fetch": [{"type": "nope"}]})


def test_a_stamping_plugin_takes_the_fast_paths_with_the_record_paths_result(tenant_plugin):
    from protocol.records import Record, RecordBatch, build_batch, join_batches, split_batches

    spec = {"produce": [{"type": "stamp_tag", "tenant": "acme"}, {"type": "insert_header",
                                                                  "header": "x", "value": "1"}]}
    raw = join_batches([
        build_batch([Record(b"k", b"v", []) for _ in range(3)], base_timestamp=1),
        build_batch([Record(b"k", b"v", [("tenant", b"own")]), Record(b"k", b"v", [])],
                    base_timestamp=1),
    ])
    results = []
    for fast in (True, False):
        chains = build_chains(spec)
        chain = type(chains.produce)(chains.produce.members, fast_paths=fast)
        assert (chain._plan("t", None).fast is not None) == fast
        batches = split_batches(raw)
        assert chain.process("t", 0, batches, ConnectionInfo()).ok
        out = [[r.headers for r in RecordBatch(b.to_bytes()).records] for b in batches]
        results.append((out, chain.stats.members["stamp_tag"].events))
    (out, events), (reference, reference_events) = results
    assert out == reference == [
        [[("tenant", b"acme"), ("req", b"%d" % i), ("x", b"1")] for i in range(3)],
        [[("tenant", b"own"), ("req", b"0"), ("x", b"1")],
         [("tenant", b"acme"), ("req", b"1"), ("x", b"1")]],
    ]
    # The first batch was stamped whole (one bulk call), the second record by record.
    assert events == {"bulk": 1, "kept": 1} and reference_events == {"kept": 1}


def test_a_plugin_that_declares_stamps_must_give_columns(tenant_plugin):
    with pytest.raises(ConfigError, match=r"produce\[0\]: interceptor 'stamps_no_columns' "
                                          r"declares stamps"):
        build_chains({"produce": [{"type": "stamps_no_columns"}]})
