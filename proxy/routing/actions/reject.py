"""``reject:``: the record's whole partition is refused with INVALID_RECORD, nothing of it
written anywhere.

```yaml
- match: {headers: {header: pii, eq: true}}
  reject: "pii records may not be written here"   # or true: a message naming the rule
```

It applies to every record it matches, those that carry Herald's origin mark included.
"""

from __future__ import annotations

from dataclasses import dataclass

from configuration import InvalidConfig
from proxy.routing.actions.api import Action, Planner, Rule, RuleSite


@dataclass
class RejectSettings:
    reject: str | bool

    def __post_init__(self) -> None:
        if self.reject is False or self.reject == "":
            raise InvalidConfig("reject", "expected true or a message")


class Reject(Action):
    name = "reject"
    selects = ("reject",)
    Settings = RejectSettings

    def __init__(self, settings: RejectSettings, site: RuleSite) -> None:
        super().__init__(settings, site)
        reason = settings.reject
        self.message = reason if isinstance(reason, str) else f"refused by routing rule {site.rule}"

    def apply(self, plan: Planner, rule: Rule, index: int) -> None:
        plan.refuse(rule, self.message)
