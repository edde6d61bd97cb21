"""What the tests of the shipped configurations ask of their causal links."""

from __future__ import annotations

from typing import Any

from interceptors.chains_from_yaml import build_chains


def link_scope(section: dict[str, Any]) -> str:
    """The scope of the causal links an ``interceptors`` section turns on, checked by building
    its chains as Herald does: `trace_context` has `link`, and its fetch member, which
    remembers what clients fetched, ends the fetch chain. Fails when links are off."""
    chains = build_chains(section)
    assert [m.name for m in chains.fetch.members][-1:] == ["trace_context.fetched"], section
    (member,) = [m for m in section["produce"] if m["type"] == "trace_context"]
    return member["link"].get("scope", "host")
