"""`performance`: whether sessions may hand their frames to the native relay."""

from __future__ import annotations

from configuration import Node

NATIVE_RELAY_OFF = "off"
NATIVE_RELAY_AUTO = "auto"


def parse_performance(node: Node) -> str:
    """`performance.native_relay`: `auto`, the default (plaintext sessions move the frames no
    filter reads through the native relay, when it is built) or `off` (every session on the
    Python path: the way back should the engine misbehave somewhere).

    YAML 1.1 reads a bare `off` as false, so false means off too.
    """
    value = node.get("native_relay", NATIVE_RELAY_AUTO)
    if value is False:
        value = NATIVE_RELAY_OFF
    if value not in (NATIVE_RELAY_OFF, NATIVE_RELAY_AUTO):
        node.errors.add(f"{node.key_path('native_relay')}: expected off or auto, got {value!r}")
    node.done()
    mode: str = value  # a YAML value: one of the two strings unless an error was recorded
    return mode
