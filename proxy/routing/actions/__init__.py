"""Routing actions by name: what a rule does to the records it matches.

Each action is a class with a settings dataclass and an `apply` method (`api.Action`); rule
parsing and the produce filter go through this registry only. A new action is one module
here and one line below.
"""

from __future__ import annotations

from proxy.routing.actions.api import Action
from proxy.routing.actions.mirror import Mirror
from proxy.routing.actions.move import Move
from proxy.routing.actions.reject import Reject

ACTIONS: dict[str, type[Action]] = {
    "move": Move,
    "mirror": Mirror,
    "reject": Reject,
}
