"""``mirror:``: a copy of the record goes elsewhere; the original is written as if no rule
matched.

```yaml
- match: {headers: {header: debug, present: true}}
  mirror: {cluster: analysis, topic: debug-copy, partition: same}
```
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.routing.actions.api import Route, RuleSite, TargetSettings


@dataclass
class MirrorSettings:
    mirror: TargetSettings


class Mirror(Route):
    name = "mirror"
    selects = ("mirror",)
    Settings = MirrorSettings
    keep = True

    def __init__(self, settings: MirrorSettings, site: RuleSite) -> None:
        super().__init__(settings, site)
        self.target = settings.mirror.target(site, "mirror.")
