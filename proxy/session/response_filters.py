"""Which chain members see a response, and running them over it.

A response goes to the members that want its API and version, and to those that left a note
on its request (they wait for its answer whatever its API). Whole responses and the tails of
streamed Fetch responses are read the same way.
"""

from __future__ import annotations

from protocol.message import Message
from proxy.filters.chain import Exchange, Filter, FilterChain, SessionContext
from proxy.session.correlation import InFlight


class ResponseFilters:
    """The response side of a session's filter chain."""

    __slots__ = ("_chain", "_ctx")

    def __init__(self, chain: FilterChain, ctx: SessionContext) -> None:
        self._chain = chain
        self._ctx = ctx

    def for_entry(self, entry: InFlight) -> tuple[Filter, ...]:
        """The members that see the response to `entry`: those that want its API and
        version, and those that left a note on its request."""
        filters = self._chain.for_response(entry.api_key, entry.api_version)
        if entry.exchange is not None:
            filters += tuple(f for f in entry.exchange.notes if f not in filters)
        return filters

    async def run(
        self, filters: tuple[Filter, ...], exchange: Exchange, entry: InFlight, msg: Message
    ) -> bool:
        """Let each of `filters` read (and change) the decoded response; True if any did."""
        changed = False
        for f in filters:
            changed |= await f.on_response(
                self._ctx, exchange, entry.api_key, entry.api_version, msg
            )
        return changed
