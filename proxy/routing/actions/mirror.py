"""``mirror:``: a copy of the record goes elsewhere; the original is written as if no rule
matched.

```yaml
- match: {headers: {header: debug, present: true}}
  mirror: {cluster: analysis, topic: debug-copy, partition: same}
```
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from proxy.routing.actions.api import Action, Planner, RuleSite, TargetSettings

if TYPE_CHECKING:
    from proxy.routing.rules import Rule


@dataclass
class MirrorSettings:
    mirror: TargetSettings


class Mirror(Action):
    name = "mirror"
    selects = ("mirror",)
    Settings = MirrorSettings
    routes = True

    def __init__(self, settings: MirrorSettings, site: RuleSite) -> None:
        super().__init__(settings, site)
        self.target = settings.mirror.target(site, "mirror.")

    def apply(self, plan: Planner, rule: Rule, index: int) -> None:
        plan.route(rule, index, keep=True)
