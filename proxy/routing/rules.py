"""Routing rules: what `routing:` in `proxy.yaml` says, and the first-match decision per record.

```yaml
routing:
  delivery_timeout_s: 30         # how long a destination may take to acknowledge
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

A record carrying the origin header (`herald.route.origin`) was routed once already; move and
mirror rules never apply to it again, which is what stops loops between Heralds. A client that
forges the header only keeps its record where it sent it: it cannot make one travel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from interceptors.config import ConfigError, InvalidConfig, Node
from interceptors.patterns import NameMatcher, matcher
from protocol.contracts.headers import ROUTE_ORIGIN as ORIGIN_HEADER
from proxy.routing.predicates import Header, Predicate, compile_predicate

PRIMARY = "upstream"
"""The name the primary cluster goes by in rules and metrics."""

MOVE, MIRROR, REJECT = "move", "mirror", "reject"
SAME, KEY = "same", "key"


@dataclass(frozen=True)
class Target:
    """Where a moved or mirrored record goes."""

    cluster: str  # PRIMARY or a name under `clusters:`
    topic: str | None  # None: the record's own topic
    partition: str | int  # SAME, KEY or an explicit partition number


@dataclass(frozen=True, eq=False)
class Rule:
    index: int
    name: str
    action: str  # MOVE, MIRROR or REJECT
    target: Target | None
    message: str
    shadow: bool
    topics: NameMatcher | None
    client_ids: NameMatcher | None
    headers: Predicate | None

    def covers(self, topic: str, client_id: str | None) -> bool:
        """Whether the rule can apply to records of this topic from this client at all."""
        if self.topics is not None and not self.topics(topic):
            return False
        return self.client_ids is None or self.client_ids(client_id or "")


@dataclass(frozen=True)
class RoutingConfig:
    rules: tuple[Rule, ...] = ()
    delivery_timeout_s: float = 30.0

    def clusters(self) -> set[str]:
        """Every cluster some rule writes to (shadow rules included: they may be promoted)."""
        return {r.target.cluster for r in self.rules if r.target is not None}


def parse_routing(node: Node, clusters: set[str]) -> RoutingConfig:
    """The `routing:` section; `clusters` are the names a rule may use besides the primary."""
    timeout = node.number("delivery_timeout_s", 30.0, float, 1)
    raw = node.get("rules", [])
    if not isinstance(raw, list):
        raise ConfigError(f"{node.key_path('rules')}: expected a list of rules")
    rules = []
    names: set[str] = set()

    def rule_at(i: int, item: Any) -> Rule:
        return _parse_rule(Node(item, f"{node.key_path('rules')}[{i}]", node.errors), i, clusters)

    for i, item in enumerate(raw):
        rule = node.attempt(rule_at, i, item)  # each rule checked, even after a bad one
        if rule is None:
            continue
        if rule.name in names:
            node.errors.add(f"{node.key_path('rules')}[{i}].name: {rule.name!r} is used twice")
        names.add(rule.name)
        rules.append(rule)
    node.done()
    return RoutingConfig(tuple(rules), timeout)


def _parse_rule(node: Node, index: int, clusters: set[str]) -> Rule:
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
    actions = [k for k in ("cluster", "topic", "mirror", "reject") if k in node.data]
    moving = "cluster" in node.data or "topic" in node.data
    if not actions or (moving and len(actions) > (("cluster" in actions) + ("topic" in actions))):
        raise ConfigError(f"{node.path}: expected one action: cluster/topic (move), mirror, "
                          f"or reject (got {', '.join(actions) or 'none'})")
    target: Target | None = None
    message = ""
    if moving:
        action = MOVE
        target = _target(node, clusters)
        if target.cluster == PRIMARY and target.topic is None:
            raise ConfigError(f"{node.path}: a move within the primary cluster needs a topic")
    elif "mirror" in actions:
        action = MIRROR
        mirror = node.child("mirror", required=True)
        target = _target(mirror, clusters)
        mirror.done()
    else:
        action = REJECT
        reason = node.get("reject")
        if reason is True:
            message = f"refused by routing rule {name}"
        elif isinstance(reason, str) and reason:
            message = reason
        else:
            raise ConfigError(f"{node.key_path('reject')}: expected true or a message")
    node.done()
    return Rule(index, name, action, target, message, shadow, topics, client_ids, headers)


def _target(node: Node, clusters: set[str]) -> Target:
    cluster = node.get("cluster", PRIMARY)
    if cluster != PRIMARY and cluster not in clusters:
        known = ", ".join(sorted(clusters | {PRIMARY}))
        raise ConfigError(f"{node.key_path('cluster')}: no cluster named {cluster!r} "
                          f"(known: {known})")
    topic = node.get("topic")
    if topic is not None and (not isinstance(topic, str) or not topic):
        raise ConfigError(f"{node.key_path('topic')}: expected a topic name")
    partition = node.get("partition", SAME)
    if isinstance(partition, bool) or not (
        partition in (SAME, KEY) or (isinstance(partition, int) and partition >= 0)
    ):
        raise ConfigError(f"{node.key_path('partition')}: expected same, key or a partition "
                          f"number >= 0, got {partition!r}")
    return Target(cluster, topic, partition)


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


@dataclass(frozen=True, slots=True)
class Decision:
    """What happens to one record: `rule` is None when it stays where it was sent.

    `shadowed` lists the shadow rules that matched before it (they change nothing)."""

    rule: Rule | None
    shadowed: tuple[Rule, ...] = ()


STAY = Decision(None)


class RoutingTable:
    """First match wins, in config order; the rules that can apply are cached per
    (topic, client id), so a topic no rule names costs one dict lookup per partition."""

    def __init__(self, config: RoutingConfig) -> None:
        self.config = config
        self.rules = config.rules
        self._cache: dict[tuple[str, str | None], tuple[Rule, ...]] = {}
        self._decisions: dict[int, Decision] = {}  # per rule, when no shadow rule matched

    def candidates(self, topic: str, client_id: str | None) -> tuple[Rule, ...]:
        key = (topic, client_id)
        found = self._cache.get(key)
        if found is None:
            if len(self._cache) >= 4096:
                self._cache.clear()
            found = self._cache[key] = tuple(r for r in self.rules if r.covers(topic, client_id))
        return found

    def decide(self, candidates: tuple[Rule, ...], headers: list[Header]) -> Decision:
        shadowed: list[Rule] | None = None
        routed: bool | None = None  # whether the record carries the origin header: looked up
        for rule in candidates:     # only once a rule that would route it matches
            if rule.headers is not None and not rule.headers(headers):
                continue
            if rule.action != REJECT:
                if routed is None:
                    routed = _has_origin(headers)
                if routed:
                    continue  # routed once already: only reject rules still apply
            if rule.shadow:
                if shadowed is None:
                    shadowed = []
                shadowed.append(rule)
                continue
            if shadowed is None:
                found = self._decisions.get(rule.index)
                if found is None:
                    found = self._decisions[rule.index] = Decision(rule)
                return found
            return Decision(rule, tuple(shadowed))
        return Decision(None, tuple(shadowed)) if shadowed else STAY


def _has_origin(headers: list[Header]) -> bool:
    for k, _ in headers:
        if k == ORIGIN_HEADER:
            return True
    return False


def parse_clusters(node: Node, parse_one: Callable[[Node], Any]) -> dict[str, Any]:
    """The `clusters:` section: name → whatever `parse_one` makes of each (an UpstreamConfig;
    None for one whose errors were recorded, so rules naming it are not refused again)."""
    out = {}
    for name in list(node.data):
        if not isinstance(name, str) or not name or name == PRIMARY:
            node.errors.add(f"{node.key_path(str(name))}: cluster names are non-empty "
                            f"strings other than {PRIMARY!r}")
            continue
        out[name] = node.attempt(_cluster, node, name, parse_one)  # None: recorded as bad
    return out


def _cluster(node: Node, name: str, parse_one: Callable[[Node], Any]) -> Any:
    return parse_one(node.child(name, required=True))
