"""The TLS handshake of an accepted client, and the principal its certificate names.

A handshake that fails (a plaintext client on a TLS listener, a certificate refused, a peer
that never says hello) costs that connection only: it is counted, logged with a reason an
operator can act on, and closed.
"""

from __future__ import annotations

import ssl

import trio
from prometheus_client import Counter

from proxy.net.transport import TlsTransport
from proxy.observability.logs import get_logger
from proxy.security.principal import NoRuleMatched, tls_principal
from proxy.security.tls import ReloadingContext
from proxy.security.tls_config import ServerTlsConfig

log = get_logger("server")


async def tls_handshake(
    client: trio.SocketStream, peer: str, listen_tls: ReloadingContext, handshakes: Counter
) -> tuple[TlsTransport, str | None] | None:
    """The client's TLS transport and its certificate's principal, once the handshake is
    done (None: it failed, which is logged and costs this connection only)."""
    tls = listen_tls.config
    assert isinstance(tls, ServerTlsConfig)  # a listener's context is made from its server side
    transport = TlsTransport(client, listen_tls.context, server_side=True)
    outcome, reason = "failed", ""
    try:
        with trio.fail_after(tls.handshake_timeout_s):
            await transport.handshake()
        der = transport.peer_certificate()
        principal = None
        if der:
            principal = tls_principal(der, tls.principal_from, tls.principal_mapper)
        handshakes.labels("ok").inc()
        return transport, principal
    except trio.TooSlowError:
        outcome, reason = "timeout", f"TLS handshake not finished in {tls.handshake_timeout_s}s"
    except NoRuleMatched as exc:
        outcome, reason = "refused", str(exc)
    except ssl.SSLError as exc:
        reason = _tls_reason(exc)
    except (OSError, trio.BrokenResourceError) as exc:
        reason = f"connection lost during the TLS handshake ({exc.__class__.__name__})"
    handshakes.labels(outcome).inc()
    log.warning("tls_handshake_failed", client=peer, reason=reason)
    await transport.aclose()
    return None


def _tls_reason(exc: ssl.SSLError) -> str:
    reason = getattr(exc, "reason", None) or str(exc)
    if reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNKNOWN_PROTOCOL",
                  "UNEXPECTED_MESSAGE", "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE"):
        return f"not a TLS ClientHello (a plaintext client on a TLS listener?): {reason}"
    if "CERTIFICATE" in reason or "UNKNOWN_CA" in reason:
        return f"client certificate refused: {reason}"
    return f"TLS handshake failed: {reason}"
