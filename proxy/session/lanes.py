"""One direction of a session's bytes, as its pump, its streamer and the native relay share it.

A lane outlives every run of the Python pumps: the native relay hands the bytes it read and did
not forward back into the lane's frame decoder, and takes them from there again. What the
decoder buffers is what the lane holds of the global memory budget.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.framing import FrameDecoder
from proxy.limits.memory_budget import Holder
from proxy.net.booked import receive_booked
from proxy.net.transport import Transport
from proxy.observability.metrics import CounterSeries

RECV = 256 * 1024
"""What one read from a socket asks for."""


@dataclass(slots=True)
class Lane:
    """Requests (client to broker) or responses (broker to client)."""

    decoder: FrameDecoder  # bytes read and not yet whole frames
    held: Holder | None  # what they hold of the memory budget (None: no budget)
    read: CounterSeries  # bytes read from the side the frames come from
    sent: CounterSeries  # bytes sent to the side they go to

    async def receive(self, transport: Transport, drained: bool) -> tuple[bytes, bool]:
        """`Transport.receive`, through the memory budget when there is one."""
        if self.held is None:
            return await transport.receive(RECV, drained)
        return await receive_booked(transport, self.held, RECV, drained)

    def book(self) -> None:
        """The lane holds what its decoder buffers now."""
        if self.held is not None:
            self.held.set(self.decoder.buffered)

    def release(self) -> None:
        """The session is over: give back what the lane held."""
        if self.held is not None:
            self.held.release()
