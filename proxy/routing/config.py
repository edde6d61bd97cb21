"""`routing:` and `clusters:` in `proxy.yaml`: the rules as configured, each with the action
it selects, and the named clusters rules may write to.

```yaml
routing:
  delivery_timeout_s: 30         # how long a destination may take to acknowledge
  origin_key: {env: HERALD_ORIGIN_KEY}   # seals Herald's origin mark (see origin.py)
  journal: auto                  # where producers' sequence shifts outlive a crash (journal.py):
                                 # auto | off | a file path (relative to this file)
  rules:
    - name: eu-orders            # metric label; defaults to rule-<index>
      match:
        topics: [orders, "prefix:orders."]   # interceptors.patterns syntax
        client_ids: ["prefix:checkout"]
        headers: {header: region, equals: eu}  # see predicates.py
      cluster: eu                # another cluster (a name under `clusters:`) ...
      topic: orders-eu           # ... and/or another topic (default: the same name)
      partition: same            # same | key | N
      shadow: false              # true: evaluate and count, change nothing
    - match: {headers: {header: debug, present: true}}
      mirror: {cluster: analysis, topic: debug-copy}   # a copy; the original stays
    - match: {headers: {header: pii, eq: true}}
      reject: "pii records may not be written here"
```

What a rule does is an action (`proxy.routing.actions`): the keys of a rule other than
`name`, `match` and `shadow` select exactly one, and are that action's settings. A named
cluster has the shape of `upstream` (`proxy.upstream.config`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from configuration import ConfigError, InvalidConfig, Node, build_config
from interceptors.patterns import NameMatcher, matcher
from proxy.routing.actions import ACTIONS
from proxy.routing.actions.api import PRIMARY, Action, Rule, RuleSite
from proxy.routing.origin import MIN_SECRET_CHARS, PROCESS_SEAL, OriginSeal
from proxy.routing.predicates import compile_predicate
from proxy.security.config import parse_secret
from proxy.upstream.config import UpstreamConfig, parse_upstream

JOURNAL_AUTO, JOURNAL_OFF = "auto", "off"
STATE_DIR_ENV = "HERALD_STATE_DIR"


@dataclass(frozen=True)
class RoutingConfig:
    rules: tuple[Rule, ...] = ()
    delivery_timeout_s: float = 30.0
    seal: OriginSeal = field(default=PROCESS_SEAL)  # from `origin_key`, else the process's
    journal: str = JOURNAL_AUTO  # auto | off | a path (see `journal_path`)

    def clusters(self) -> set[str]:
        """Every cluster some rule writes to (shadow rules included: they may be promoted)."""
        return {r.target.cluster for r in self.rules if r.target is not None}


def parse_routing(node: Node, clusters: set[str],
                  actions: Mapping[str, type[Action]] = ACTIONS) -> RoutingConfig:
    """The `routing:` section; `clusters` are the names a rule may use besides the primary,
    `actions` what rules may do."""
    timeout = node.number("delivery_timeout_s", 30.0, float, 1)
    seal = _seal(node)
    journal = node.get("journal", JOURNAL_AUTO)
    if not isinstance(journal, str) or not journal.strip():
        raise ConfigError(f"{node.key_path('journal')}: expected {JOURNAL_AUTO}, {JOURNAL_OFF} "
                          "or a file path")
    raw = node.get("rules", [])
    if not isinstance(raw, list):
        raise ConfigError(f"{node.key_path('rules')}: expected a list of rules")
    rules = []
    names: set[str] = set()

    def rule_at(i: int, item: object) -> Rule:
        return _parse_rule(Node(item, f"{node.key_path('rules')}[{i}]", node.errors), i,
                           frozenset(clusters), actions)

    for i, item in enumerate(raw):
        rule = node.attempt(rule_at, i, item)  # each rule checked, even after a bad one
        if rule is None:
            continue
        if rule.name in names:
            node.errors.add(f"{node.key_path('rules')}[{i}].name: {rule.name!r} is used twice")
        names.add(rule.name)
        rules.append(rule)
    node.done()
    return RoutingConfig(tuple(rules), timeout, seal, journal)


def journal_path(journal: str, source: Path | None, port: int,
                 environ: Mapping[str, str]) -> Path | None:
    """The journal's file: `off` none; a path as given (relative to the config file's
    folder); `auto` `routing-<listen port>.journal` in `$HERALD_STATE_DIR`, else in
    `.herald-state` beside the config file (None when there is no file either: a config
    built in memory). The port keeps two Heralds that share a folder apart."""
    if journal == JOURNAL_OFF:
        return None
    folder = source.parent if source is not None else None
    if journal != JOURNAL_AUTO:
        path = Path(journal).expanduser()
        return path if path.is_absolute() or folder is None else folder / path
    state_dir = environ.get(STATE_DIR_ENV)
    if state_dir:
        return Path(state_dir) / f"routing-{port}.journal"
    if folder is None:
        return None
    return folder / ".herald-state" / f"routing-{port}.journal"


def _seal(node: Node) -> OriginSeal:
    """`origin_key`, read now (a missing file or variable fails the load, naming the path)."""
    ref = parse_secret(node, "origin_key")
    if ref is None:
        return PROCESS_SEAL
    secret = ref.read()
    if len(secret) < MIN_SECRET_CHARS:
        raise ConfigError(f"{node.key_path('origin_key')}: the key must be at least "
                          f"{MIN_SECRET_CHARS} characters (a short one could be guessed)")
    return OriginSeal(secret.encode())


def _parse_rule(node: Node, index: int, clusters: frozenset[str],
                actions: Mapping[str, type[Action]]) -> Rule:
    name = node.get("name", f"rule-{index}")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{node.key_path('name')}: expected a non-empty string")
    match = node.child("match", required=True)
    topics = _names(match, "topics")
    client_ids = _names(match, "client_ids")
    headers_raw = match.get("headers")
    headers = (compile_predicate(headers_raw, match.key_path("headers"))
               if headers_raw is not None else None)
    match.done()
    shadow = node.get("shadow", False)
    if not isinstance(shadow, bool):
        raise ConfigError(f"{node.key_path('shadow')}: expected true or false")
    handler = _action(node, RuleSite(name, clusters), actions)
    node.done()
    return Rule(index, name, handler, shadow, topics, client_ids, headers)


def _action(node: Node, site: RuleSite, actions: Mapping[str, type[Action]]) -> Action:
    """The one action the rule's keys select, built from the keys it reads."""
    chosen = [cls for cls in actions.values() if any(k in node.data for k in cls.selects)]
    if len(chosen) != 1:
        given = [k for cls in actions.values() for k in cls.selects if k in node.data]
        choices = [cls.describe() for cls in actions.values()]
        if len(choices) > 1:
            choices[-2:] = [f"{choices[-2]} or {choices[-1]}"]
        raise ConfigError(f"{node.path}: expected one action: {', '.join(choices)} "
                          f"(got {', '.join(given) or 'none'})")
    (cls,) = chosen
    data = {k: node.get(k) for k in cls.keys() if node.get(k) is not None}
    settings = build_config(cls.Settings, data, node.path)
    try:
        return cls(settings, site)
    except InvalidConfig as exc:
        raise ConfigError(f"{node.key_path(exc.field)}: {exc.message}" if exc.field
                          else f"{node.path}: {exc.message}") from None


def _names(node: Node, key: str) -> NameMatcher | None:
    value = node.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{node.key_path(key)}: expected a list of names or patterns")
    try:
        return matcher(value, node.key_path(key))
    except InvalidConfig as exc:
        raise ConfigError(str(exc)) from None


def parse_clusters(node: Node) -> dict[str, UpstreamConfig | None]:
    """The `clusters:` section: name → its `UpstreamConfig` (None for one whose errors were
    recorded, so rules naming it are not refused again)."""
    out = {}
    for name in list(node.data):
        if not isinstance(name, str) or not name or name == PRIMARY:
            node.errors.add(f"{node.key_path(str(name))}: cluster names are non-empty "
                            f"strings other than {PRIMARY!r}")
            continue
        out[name] = node.attempt(_cluster, node, name)  # None: recorded as bad
    return out


def _cluster(node: Node, name: str) -> UpstreamConfig:
    return parse_upstream(node.child(name, required=True))
