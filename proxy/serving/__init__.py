"""What the proxy process serves with: its listeners, the connections they accept, reloads.

`proxy.server.Proxy` composes them: `listeners` opens the bootstrap port and one port per
broker; `connections` turns each accepted connection into a running `Session` (admission,
TLS via `client_tls`, the upstream connection) and drains them at shutdown; `reload` applies
a re-read config file to the running chains.
"""
