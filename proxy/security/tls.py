"""SSL contexts for both sides, rebuilt when their certificate files change.

Certificates rotate (cert-manager renews them before they expire and swaps the files of the
mounted Secret); a proxy must pick up the new ones without a restart. Each context is kept by a
`ReloadingContext`, which rebuilds it when a file's identity (inode, size, mtime) changes, on
SIGHUP or on the periodic check. New connections get the new context; established ones keep
the one they were made with. A rotation that fails (a half-written key) keeps the old context
and says so in the log.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable
from pathlib import Path

from proxy.observability.logs import get_logger
from proxy.security.tls_config import ClientTlsConfig, ServerTlsConfig

log = get_logger("tls")

_VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}
_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class TlsSetupError(ValueError):
    """A certificate, key or CA bundle that cannot be used; names the YAML path."""


def server_context(config: ServerTlsConfig) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = _VERSIONS[config.min_version]
    ctx.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_NO_COMPRESSION
    _load_chain(ctx, config.cert_file, config.key_file, config.path)
    if config.client_ca_file is not None:
        _load_ca(ctx, config.client_ca_file, f"{config.path}.client_ca_file")
    ctx.verify_mode = _VERIFY[config.client_auth]
    return ctx


def client_context(config: ClientTlsConfig) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.minimum_version = _VERSIONS[config.min_version]
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    if config.ca_file is not None:
        _load_ca(ctx, config.ca_file, f"{config.path}.ca_file")
    # The chain is always verified; only the name check can be turned off.
    ctx.check_hostname = config.verify_hostname
    if config.cert_file is not None and config.key_file is not None:
        _load_chain(ctx, config.cert_file, config.key_file, config.path)
    return ctx


def _load_chain(ctx: ssl.SSLContext, cert: Path, key: Path, path: str) -> None:
    try:
        ctx.load_cert_chain(cert, key)
    except FileNotFoundError as exc:
        raise TlsSetupError(f"{path}: cannot read {exc.filename} ({exc.strerror})") from None
    except (ssl.SSLError, OSError) as exc:
        raise TlsSetupError(
            f"{path}: cert_file {cert} and key_file {key} are not a usable certificate and "
            f"matching private key (PEM): {_reason(exc)}"
        ) from None


def _load_ca(ctx: ssl.SSLContext, ca: Path, path: str) -> None:
    try:
        ctx.load_verify_locations(cafile=ca)
    except FileNotFoundError as exc:
        raise TlsSetupError(f"{path}: cannot read {ca} ({exc.strerror})") from None
    except (ssl.SSLError, OSError) as exc:
        raise TlsSetupError(f"{path}: {ca} is not a PEM CA bundle: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    return getattr(exc, "reason", None) or str(exc)


# A file as last seen: (inode, size, mtime in ns), or None when it could not be read.
_FileIdentity = tuple[int, int, int] | None


def _identity(paths: tuple[Path, ...]) -> tuple[_FileIdentity, ...]:
    out: list[_FileIdentity] = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


class ReloadingContext:
    """The current SSL context for one TLS configuration, rebuilt when its files change."""

    def __init__(self, config: ServerTlsConfig | ClientTlsConfig) -> None:
        self.config = config
        self._build: Callable[[], ssl.SSLContext] = (
            (lambda: server_context(config)) if isinstance(config, ServerTlsConfig)
            else (lambda: client_context(config))
        )
        self._seen = _identity(config.files)
        self.context = self._build()
        self.generation = 1

    def check(self) -> str | None:
        """Rebuild if a file changed: "applied", "failed" (the old context stays), or None
        when nothing changed."""
        seen = _identity(self.config.files)
        if seen == self._seen:
            return None
        try:
            fresh = self._build()
        except TlsSetupError as exc:
            # Half-rotated files fail here; the next check, or SIGHUP, tries again.
            log.error("tls_reload_failed", config=self.config.path, error=str(exc))
            return "failed"
        self._seen = seen
        self.context = fresh
        self.generation += 1
        log.info("tls_reloaded", config=self.config.path, generation=self.generation)
        return "applied"
