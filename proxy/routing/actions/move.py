"""``cluster:`` / ``topic:`` (move): the record leaves its batch for another topic or cluster.

```yaml
- match: {headers: {header: region, equals: eu}}
  cluster: eu          # a name under `clusters:` (default: the primary, `upstream`)
  topic: orders-eu     # default: the record's own topic
  partition: same      # same | key | N
```
"""

from __future__ import annotations

from configuration import InvalidConfig
from proxy.routing.actions.api import PRIMARY, Route, RuleSite, TargetSettings


class Move(Route):
    name = "move"
    selects = ("cluster", "topic")
    Settings = TargetSettings
    keep = False

    def __init__(self, settings: TargetSettings, site: RuleSite) -> None:
        super().__init__(settings, site)
        self.target = settings.target(site)
        if self.target.cluster == PRIMARY and self.target.topic is None:
            raise InvalidConfig("", "a move within the primary cluster needs a topic")
