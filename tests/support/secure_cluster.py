"""A single-node Kafka cluster with secured listeners, and the certificates around it.

Listeners: PLAINTEXT (for the harness itself), SSL with client certificates required (mTLS),
SASL_SSL with PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER (Kafka's unsecured-JWS test mode), and
SASL_PLAINTEXT with PLAIN and SCRAM-SHA-512 (a sidecar's upstream inside a private network).
SCRAM users are created when the storage is formatted. KIP-368 re-authentication is on
(`connections.max.reauth.ms`), so every SASL client re-authenticates during longer tests.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.devtools.embedded_kafka import ExtraListener, KafkaCluster, free_port
from tests.support.certs import CertificateAuthority, Issued
from tests.support.herald_process import herald_config

USERS = {"alice": "alice-secret", "bob": "bob-secret", "herald": "herald-secret"}
REAUTH_MS = 8000
_PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


@dataclass
class SecureCluster:
    folder: Path
    ca: CertificateAuthority
    broker_cert: Issued
    kafka: KafkaCluster
    ssl_port: int
    sasl_port: int
    sasl_plain_port: int

    @property
    def plaintext(self) -> str:
        return self.kafka.nodes[0].address

    @property
    def ssl_address(self) -> str:
        return f"127.0.0.1:{self.ssl_port}"

    @property
    def sasl_address(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def sasl_plaintext_address(self) -> str:
        return f"127.0.0.1:{self.sasl_plain_port}"

    def client_cert(self, stem: str, cn: str, **kw: object) -> Issued:
        return self.ca.issue(stem, cn, **kw)  # type: ignore[arg-type]

    def stop(self) -> None:
        self.kafka.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


def start_secure_cluster(
    version: str, workdir: Path | None = None, extra_listeners: list[ExtraListener] | None = None
) -> SecureCluster:
    """`workdir`: where the broker keeps its log (a benchmark puts it in memory);
    `extra_listeners`: more listeners besides the secured ones (a relay's, say); a SASL_SSL
    one accepts the same users and mechanisms as the cluster's own."""
    folder = Path(tempfile.mkdtemp(prefix="herald-secure-"))
    ca = CertificateAuthority(folder / "ca")
    broker = ca.issue("broker", "broker", hosts=("127.0.0.1", "localhost"))
    ssl_port, sasl_port, sasl_plain_port = free_port(), free_port(), free_port()
    plain_users = " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
    props = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(broker.combined),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca.pem),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": f"{_PLAIN} required {plain_users};",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": f"{_SCRAM} required;",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": f"{_SCRAM} required;",
        "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config": (
            f'{_OAUTH} required unsecuredLoginStringClaim_sub="broker";'
        ),
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            f"{_PLAIN} required {plain_users};"),
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": f"{_SCRAM} required;",
        "connections.max.reauth.ms": str(REAUTH_MS),
    }
    for extra in extra_listeners or ():
        if extra.protocol == "SASL_SSL":  # the same logins as the cluster's own SASL_SSL
            prefix = f"listener.name.{extra.name.lower()}."
            props.update({prefix + key.removeprefix("listener.name.sasl_ssl."): value
                          for key, value in props.items()
                          if key.startswith("listener.name.sasl_ssl.")})
    scram = [f"SCRAM-SHA-{bits}=[name={u},password={p}]"
             for u, p in USERS.items() for bits in (256, 512)]
    kafka = KafkaCluster(
        size=1, version=version, extra_properties=props, scram_credentials=scram,
        extra_listeners=[ExtraListener("SSL", ssl_port, ssl_port, "SSL"),
                         ExtraListener("SASL_SSL", sasl_port, sasl_port, "SASL_SSL"),
                         ExtraListener("SASL_PLAINTEXT", sasl_plain_port, sasl_plain_port,
                                       "SASL_PLAINTEXT"),
                         *(extra_listeners or ())],
        workdir=workdir,
    )
    try:
        kafka.start()
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return SecureCluster(folder, ca, broker, kafka, ssl_port, sasl_port, sasl_plain_port)



def tls_herald_config(secure: SecureCluster, name: str, mode: str, upstream: dict[str, Any],
                      **overrides: Any) -> dict[str, Any]:
    """A Herald serving TLS to its clients (a certificate `name` for 127.0.0.1 and localhost
    from the cluster's CA), its native relay in `mode`, in front of `upstream` (the config's
    `upstream` section: which of the cluster's listeners, with what TLS)."""
    served = secure.ca.issue(name, "herald", hosts=("127.0.0.1", "localhost"))
    config = herald_config(
        secure.plaintext, admin={"bind": f"127.0.0.1:{free_port()}"},
        performance={"native_relay": mode},
        listen={"tls": {"cert_file": str(served.cert), "key_file": str(served.key)}},
        **overrides)
    config["upstream"] = upstream
    return config
