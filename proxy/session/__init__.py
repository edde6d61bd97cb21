"""Client sessions: one client connection, its upstream connection, and what runs between them.

`session.Session` runs with the proxy's `environment.SessionEnvironment` (what every session
shares, built once by the proxy) and composes the parts, one module each: `request_pump` and
`response_pump` move the frames, over a `lanes.Lane` per direction, matched through
`correlation`'s table; `streaming` forwards large responses as they arrive (with
`proxy.net.splice` where it can) and `response_filters` picks the chain members that read a
response; `native_phases` hands the session to the native relay and takes it back; `reauth`
renews Herald's own upstream authentication. Below them: `outgoing` (frames on their way out)
and `closing` (how a session ends); the sockets and frame peeks are `proxy.net`'s.
"""
