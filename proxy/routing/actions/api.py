"""What every routing action implements, and the pieces the built-in ones share.

An action is what a rule does to the records it matches. Like an interceptor, it is a class
with a settings dataclass and one hot method::

    @dataclass
    class TagSettings:
        tag: str

    class Tag(Action):
        name = "tag"                  # the registry key and the `action` metric label
        selects = ("tag",)            # the rule keys whose presence chooses this action
        Settings = TagSettings        # its fields are the rule keys it reads

        def apply(self, plan: Planner, rule: Rule, index: int) -> None:
            ...

Rule parsing finds the one action a rule's keys select, builds its settings with
`build_config` from the keys its `Settings` declares (so errors name the YAML path of the bad
key) and constructs it with a `RuleSite`; the produce filter calls `apply` for each record the
rule decides. Neither knows any action by name: a new action is a module and a line in
`proxy.routing.actions.ACTIONS`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal, NoReturn, Protocol

from configuration import InvalidConfig, yaml_key

if TYPE_CHECKING:
    from interceptors.patterns import NameMatcher
    from proxy.routing.predicates import Predicate

PRIMARY = "upstream"
"""The name the primary cluster goes by in rules and metrics."""

SAME: Final = "same"
KEY: Final = "key"


@dataclass(frozen=True)
class Target:
    """Where a moved or mirrored record goes."""

    cluster: str  # PRIMARY or a name under `clusters:`
    topic: str | None  # None: the record's own topic
    partition: Literal["same", "key"] | int  # SAME, KEY or an explicit partition number


@dataclass(frozen=True)
class RuleSite:
    """What an action may know of the rule it belongs to while it is being built."""

    rule: str  # the rule's name (for messages)
    clusters: frozenset[str]  # the names under `clusters:`; PRIMARY is always known


class Planner(Protocol):
    """The produce filter's plan of one record batch, as actions change it."""

    def route(self, rule: Rule, index: int, keep: bool) -> None:
        """Send record `index` to the rule's target; `keep` leaves the original in place."""

    def refuse(self, rule: Rule, message: str) -> NoReturn:
        """Refuse the batch's whole partition with INVALID_RECORD and `message`."""


class Action:
    """Base class of routing actions: subclasses set the class attributes and `apply`."""

    name: ClassVar[str]
    selects: ClassVar[tuple[str, ...]]
    Settings: ClassVar[type]
    routes: ClassVar[bool] = False
    """Whether it writes records elsewhere. Such actions never apply to a record that arrived
    with Herald's origin mark: it was routed once already (loop prevention)."""

    target: Target | None = None  # where `route` sends records, for actions that route
    message: str = ""  # what a refusal tells the client, for actions that refuse

    def __init__(self, settings: Any, site: RuleSite) -> None:
        """Validate what the settings dataclass cannot check alone; raise `InvalidConfig`
        naming the YAML key (relative to the rule) at fault."""
        self.settings = settings

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The rule keys this action reads: the YAML keys of its settings' fields."""
        return tuple(yaml_key(f) for f in dataclasses.fields(cls.Settings) if f.init)

    @classmethod
    def describe(cls) -> str:
        """How a rule chooses it, for the error that lists the actions."""
        keys = "/".join(cls.selects)
        return keys if cls.selects == (cls.name,) else f"{keys} ({cls.name})"

    def apply(self, plan: Planner, rule: Rule, index: int) -> None:
        """Do what the action does to record `index` of the batch being planned."""
        raise NotImplementedError


class Route(Action):
    """An action that writes the records it decides to its `target` (set in `__init__`);
    with `keep`, the original stays where it was sent as well."""

    routes = True
    keep: ClassVar[bool]

    def apply(self, plan: Planner, rule: Rule, index: int) -> None:
        plan.route(rule, index, keep=self.keep)


@dataclass
class TargetSettings:
    """A destination as a rule writes it: `cluster`, `topic`, `partition`."""

    cluster: str = PRIMARY
    topic: str | None = None
    partition: Any = SAME  # same | key | N (checked below, so the error lists the choices)

    def __post_init__(self) -> None:
        if self.topic is not None and not self.topic:
            raise InvalidConfig("topic", "expected a topic name")
        p = self.partition
        if isinstance(p, bool) or not (p in (SAME, KEY) or (isinstance(p, int) and p >= 0)):
            raise InvalidConfig("partition", f"expected same, key or a partition number >= 0, "
                                             f"got {p!r}")

    def target(self, site: RuleSite, where: str = "") -> Target:
        """The target, once the cluster is known to exist; `where` is the YAML path of these
        settings below the rule (``mirror.``), for the error."""
        if self.cluster != PRIMARY and self.cluster not in site.clusters:
            known = ", ".join(sorted(site.clusters | {PRIMARY}))
            raise InvalidConfig(f"{where}cluster", f"no cluster named {self.cluster!r} "
                                                   f"(known: {known})")
        return Target(self.cluster, self.topic, self.partition)


@dataclass(frozen=True, eq=False)
class Rule:
    """A configured rule (`proxy.routing.config` parses them): where it applies and the action
    it selects."""

    index: int
    name: str
    handler: Action  # what the rule does: an instance of a class of `actions.ACTIONS`
    shadow: bool
    topics: NameMatcher | None
    client_ids: NameMatcher | None
    headers: Predicate | None

    @property
    def action(self) -> str:
        """The action's name: its registry key, and the `action` label of the metrics."""
        return self.handler.name

    @property
    def target(self) -> Target | None:
        return self.handler.target

    @property
    def message(self) -> str:
        return self.handler.message

    def covers(self, topic: str, client_id: str | None) -> bool:
        """Whether the rule can apply to records of this topic from this client at all."""
        if self.topics is not None and not self.topics(topic):
            return False
        return self.client_ids is None or self.client_ids(client_id or "")
