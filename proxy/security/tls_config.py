"""What a TLS side is configured with, once `proxy.yaml` is read (`proxy.security.config`
parses and checks it; `proxy.security.tls` makes the SSL contexts from it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from proxy.security.principal import PrincipalMapper

TLS_VERSIONS = ("1.2", "1.3")
CLIENT_AUTH = ("none", "requested", "required")
PRINCIPAL_FROM = ("subject", "san:dns", "san:uri", "san:email")


@dataclass(frozen=True)
class ServerTlsConfig:
    """TLS Herald serves: towards clients on its listeners, or on the admin endpoint."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None
    client_auth: str = "none"
    min_version: str = "1.2"
    principal_from: str = "subject"
    principal_mapper: PrincipalMapper | None = None
    handshake_timeout_s: float = 10.0
    path: str = "listen.tls"

    @property
    def files(self) -> tuple[Path, ...]:
        return tuple(p for p in (self.cert_file, self.key_file, self.client_ca_file) if p)


@dataclass(frozen=True)
class ClientTlsConfig:
    """TLS towards the brokers of one cluster."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    verify_hostname: bool = True
    server_name: str | None = None
    min_version: str = "1.2"
    path: str = "upstream.tls"

    @property
    def files(self) -> tuple[Path, ...]:
        return tuple(p for p in (self.ca_file, self.cert_file, self.key_file) if p)
