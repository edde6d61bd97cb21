"""Routing rules: the first-match decision per record, over the rules `routing:` configures
(`proxy.routing.config`).

A record that arrived carrying Herald's sealed origin mark (`herald.route.origin`, see
`origin.py`) was routed once already: move and mirror rules never apply to it again, which is
what stops loops between Heralds. The mark is checked on the record as it reached Herald,
before the interceptor chains (which may strip it: `audit` does), so the same rules hold
whatever the chains hold. An origin header the seal does not verify (one a client wrote) is
ignored: the record is routed like any other, so no client can opt out of a rule with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from protocol.contracts.headers import ROUTE_ORIGIN as ORIGIN_HEADER
from proxy.routing.actions.api import KEY, PRIMARY, SAME, Rule, Target
from proxy.routing.config import RoutingConfig
from proxy.routing.predicates import Header

__all__ = ["KEY", "ORIGIN_HEADER", "PRIMARY", "SAME", "Target"]


@dataclass(frozen=True, slots=True)
class Decision:
    """What happens to one record: `rule` is None when it stays where it was sent.

    `shadowed` lists the shadow rules that matched before it (they change nothing)."""

    rule: Rule | None
    shadowed: tuple[Rule, ...] = ()


STAY = Decision(None)


class Provenance(Protocol):
    """How the records of one batch arrived (`arrival.BatchArrival`)."""

    def sealed(self, index: int, headers: list[Header]) -> bool:
        """Whether record `index` (whose headers are now `headers`) arrived with a valid
        origin mark."""


class RoutingTable:
    """First match wins, in config order; the rules that can apply are cached per
    (topic, client id), so a topic no rule names costs one dict lookup per partition."""

    def __init__(self, config: RoutingConfig) -> None:
        self.config = config
        self.rules = config.rules
        self.seal = config.seal
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

    def decide(self, candidates: tuple[Rule, ...], headers: list[Header],
               provenance: Provenance | None = None, index: int = 0) -> Decision:
        """The decision for record `index` of a batch, whose headers are `headers`.

        Without `provenance` nothing proves a record was routed before: every rule applies.
        """
        shadowed: list[Rule] | None = None
        routed: bool | None = None  # whether the record arrived with Herald's origin mark:
        for rule in candidates:     # looked up only once a rule that would route it matches
            if rule.headers is not None and not rule.headers(headers):
                continue
            if rule.handler.routes:
                if routed is None:
                    routed = provenance is not None and provenance.sealed(index, headers)
                if routed:
                    continue  # routed once already: only rules that do not route still apply
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
