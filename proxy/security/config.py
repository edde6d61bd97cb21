"""The security sections of `proxy.yaml`: TLS on each side, SASL credentials, admin access.

Secrets are never written in `proxy.yaml` itself: a credential names a file or an environment
variable (`{file: /etc/herald/sasl/password}` or `{env: KAFKA_PASSWORD}`), which is checked on
load (so a typo fails at start, naming the YAML path) and read again on every use (so a
rotated Secret is picked up). Error messages name the path, the file or the variable, never
the value.
"""

from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from configuration import ConfigError, Node
from proxy.security.principal import PrincipalMapper, PrincipalRuleError
from proxy.security.tls import TlsSetupError, client_context, server_context
from proxy.security.tls_config import CLIENT_AUTH, PRINCIPAL_FROM, TLS_VERSIONS

# Re-exported: modules that parse a TLS section take its type from here, with the parser.
from proxy.security.tls_config import ClientTlsConfig as ClientTlsConfig
from proxy.security.tls_config import ServerTlsConfig as ServerTlsConfig

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


@dataclass(frozen=True)
class SecretRef:
    """Where a secret lives: a file or an environment variable. `repr` shows only where."""

    path: str  # the YAML path, for errors
    file: Path | None = None
    env: str | None = None

    def read(self) -> str:
        """The secret's current value (a file's trailing newline removed)."""
        if self.file is not None:
            try:
                return self.file.read_text().rstrip("\r\n")
            except OSError as exc:
                raise ConfigError(
                    f"{self.path}.file: cannot read {self.file} ({exc.strerror or exc})"
                ) from None
        assert self.env is not None
        value = os.environ.get(self.env)
        if value is None:
            raise ConfigError(f"{self.path}.env: environment variable {self.env} is not set")
        return value

    def __repr__(self) -> str:
        where = f"file={self.file}" if self.file is not None else f"env={self.env}"
        return f"SecretRef({where})"


@dataclass(frozen=True)
class SaslClientConfig:
    """Credentials Herald itself authenticates with (sidecar mode: credential injection)."""

    mechanism: str
    username: SecretRef | None = None
    password: SecretRef | None = None
    token: SecretRef | None = None
    path: str = "upstream.sasl"


@dataclass(frozen=True)
class PassthroughSaslConfig:
    """How Herald reads the principal of clients that authenticate through it."""

    oauthbearer_principal_claim: str = "sub"


# ---- librdkafka ----------------------------------------------------------------------------


def librdkafka_security(tls: ClientTlsConfig | None, sasl: SaslClientConfig | None
                        ) -> dict[str, Any]:
    """librdkafka settings for a cluster's TLS and SASL sections: the clients Herald makes
    itself (routing destinations, fetch_log) reach a secured cluster as `upstream` does.

    Secrets are read from their files or variables now (a rotated secret is picked up when
    the client is made again); OAUTHBEARER tokens are read on every refresh through
    `oauth_cb`.
    """
    settings: dict[str, Any] = {
        "security.protocol": ("SASL_" if sasl else "") + ("SSL" if tls else "PLAINTEXT"),
    }
    if tls is not None:
        if tls.ca_file is not None:
            settings["ssl.ca.location"] = str(tls.ca_file)
        if tls.cert_file is not None and tls.key_file is not None:
            settings["ssl.certificate.location"] = str(tls.cert_file)
            settings["ssl.key.location"] = str(tls.key_file)
        settings["ssl.endpoint.identification.algorithm"] = (
            "https" if tls.verify_hostname else "none"
        )
    if sasl is not None:
        settings["sasl.mechanism"] = sasl.mechanism
        if sasl.mechanism == "OAUTHBEARER":
            token = sasl.token
            assert token is not None
            settings["oauth_cb"] = lambda _config: _oauth_token(token.read())
        else:
            assert sasl.username is not None and sasl.password is not None
            settings["sasl.username"] = sasl.username.read()
            settings["sasl.password"] = sasl.password.read()
    return settings


def _oauth_token(token: str) -> tuple[str, float]:
    """(token, expiry in seconds since the epoch) for librdkafka's oauth_cb: the JWT's `exp`
    claim when it has one, else an hour from now (the secret is read again then)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        exp = float(claims["exp"])
    except (IndexError, ValueError, KeyError, TypeError):
        exp = time.time() + 3600
    return token, exp


# ---- parsing ------------------------------------------------------------------------------


def parse_secret(node: Node, key: str, required: bool = False) -> SecretRef | None:
    raw = node.get(key, None, required)
    if raw is None:
        return None
    path = node.key_path(key)
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{path}: expected {{file: PATH}} or {{env: VARIABLE}} (secrets are never "
            "written in the configuration itself)"
        )
    sub = Node(raw, path, node.errors)
    file, env = sub.get("file"), sub.get("env")
    sub.done()
    if (file is None) == (env is None):
        raise ConfigError(f"{path}: expected exactly one of file, env")
    if file is not None:
        if not isinstance(file, str) or not file:
            raise ConfigError(f"{path}.file: expected a path")
        ref = SecretRef(path, file=Path(file))
    else:
        if not isinstance(env, str) or not env:
            raise ConfigError(f"{path}.env: expected a variable name")
        ref = SecretRef(path, env=env)
    ref.read()  # fail on load, naming the path, rather than on the first connection
    return ref


def _file(node: Node, key: str, required: bool = False) -> Path | None:
    raw = node.get(key, None, required)
    if raw is None:
        return None
    path = node.key_path(key)
    if not isinstance(raw, str) or not raw:
        raise ConfigError(f"{path}: expected a file path")
    try:
        with open(raw, "rb"):
            pass
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {raw} ({exc.strerror or exc})") from None
    return Path(raw)


def _min_version(node: Node) -> str:
    version = str(node.get("min_version", "1.2"))
    if version not in TLS_VERSIONS:
        node.errors.add(f"{node.key_path('min_version')}: expected one of {TLS_VERSIONS}")
        return "1.2"
    return version


def parse_server_tls(parent: Node, key: str = "tls") -> ServerTlsConfig | None:
    if parent.get(key) is None:
        return None
    node = parent.child(key)
    cert = node.attempt(_file, node, "cert_file", True)
    key_file = node.attempt(_file, node, "key_file", True)
    ca = node.attempt(_file, node, "client_ca_file")
    auth = node.choice("client_auth", "required" if ca else "none", CLIENT_AUTH)
    if auth != "none" and node.data.get("client_ca_file") is None:
        node.errors.add(f"{node.key_path('client_auth')}: {auth!r} needs client_ca_file")
    version = _min_version(node)
    principal_from = node.choice("principal_from", "subject", PRINCIPAL_FROM)
    mapper = node.attempt(_principal_mapper, node)
    timeout = node.number("handshake_timeout_s", 10.0, float, 0.1)
    node.done()
    # `cert` and `key_file` are None only when their errors are recorded: such a load is refused.
    config = ServerTlsConfig(cert, key_file,  # type: ignore[arg-type]
                             ca, auth, version, principal_from, mapper, timeout, node.path)
    if node.valid:
        _check_context(config)
    return config


def _principal_mapper(node: Node) -> PrincipalMapper | None:
    rules = node.get("principal_mapping_rules")
    if rules is None:
        return None
    rules_path = node.key_path("principal_mapping_rules")
    if isinstance(rules, str):
        rules = [rules]
    if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
        raise ConfigError(f"{rules_path}: expected a list of rules")
    try:
        return PrincipalMapper.parse(rules)
    except PrincipalRuleError as exc:
        raise ConfigError(f"{rules_path}: {exc}") from None


def parse_client_tls(parent: Node, key: str = "tls") -> ClientTlsConfig | None:
    raw = parent.get(key)
    if raw is None or raw is False:
        return None
    node = Node({} if raw is True else raw, parent.key_path(key), parent.errors)
    ca = node.attempt(_file, node, "ca_file")
    cert = node.attempt(_file, node, "cert_file")
    key_file = node.attempt(_file, node, "key_file")
    if (node.data.get("cert_file") is None) != (node.data.get("key_file") is None):
        node.errors.add(f"{node.path}: cert_file and key_file go together")
    verify = node.flag("verify_hostname", True)
    server_name = node.get("server_name")
    if server_name is not None and (not isinstance(server_name, str) or not server_name):
        node.errors.add(f"{node.key_path('server_name')}: expected a host name")
    version = _min_version(node)
    node.done()
    config = ClientTlsConfig(ca, cert, key_file, verify, server_name, version, node.path)
    if node.valid:
        _check_context(config)
    return config


def parse_sasl_client(parent: Node, key: str = "sasl") -> SaslClientConfig | None:
    if parent.get(key) is None:
        return None
    node = parent.child(key)
    mechanism = node.get("mechanism", required=True)
    if not isinstance(mechanism, str) or mechanism.upper() not in SASL_MECHANISMS:
        raise ConfigError(
            f"{node.key_path('mechanism')}: expected one of {', '.join(SASL_MECHANISMS)}, "
            f"got {mechanism!r}"
        )
    mechanism = mechanism.upper()
    if mechanism == "OAUTHBEARER":
        token = node.attempt(parse_secret, node, "token", True)
        username = password = None
    else:
        username = node.attempt(parse_secret, node, "username", True)
        password = node.attempt(parse_secret, node, "password", True)
        token = None
    node.done()
    return SaslClientConfig(mechanism, username, password, token, node.path)


def parse_passthrough_sasl(parent: Node, key: str = "sasl") -> PassthroughSaslConfig:
    node = parent.child(key)
    claim = node.get("oauthbearer_principal_claim", "sub")
    if not isinstance(claim, str) or not claim:
        node.errors.add(f"{node.key_path('oauthbearer_principal_claim')}: expected a name")
        claim = "sub"
    node.done()
    return PassthroughSaslConfig(claim)


def _check_context(config: ServerTlsConfig | ClientTlsConfig) -> None:
    """Build the SSL context once on load, so a bad certificate or key fails at start."""
    try:
        if isinstance(config, ServerTlsConfig):
            server_context(config)
        else:
            client_context(config)
    except TlsSetupError as exc:
        raise ConfigError(str(exc)) from None
