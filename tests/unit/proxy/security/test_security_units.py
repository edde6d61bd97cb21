"""Pure parts of the security work: principal mapping rules, certificate names, SASL mechanism
messages (with the RFC 7677 example exchange), and the configuration's errors."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from configuration import ConfigError
from proxy.config.proxy_yaml import parse_config
from proxy.security.principal import (
    NoRuleMatched,
    PrincipalMapper,
    PrincipalRuleError,
    tls_principal,
)
from proxy.security.sasl import (
    SaslError,
    ScramClient,
    is_scram_client_final,
    oauthbearer_message,
    oauthbearer_principal,
    plain_message,
    plain_user,
    scram_user,
)
from tests.support.certs import CertificateAuthority

# ---- principal mapping (Kafka's ssl.principal.mapping.rules) -----------------------------


def test_rules_in_kafkas_syntax() -> None:
    mapper = PrincipalMapper.parse([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?)$/$1\\/$2/U",
        "DEFAULT",
    ])
    assert mapper.map("CN=kafka-svc,OU=ServiceUsers,O=Acme") == "kafka-svc"
    assert mapper.map("CN=Alice,OU=Eng,O=Acme") == "alice@eng"
    assert mapper.map("cn=bob,ou=ops") == "BOB/OPS"
    assert mapper.map("C=US") == "C=US"  # DEFAULT: the name unchanged


def test_no_matching_rule_is_refused_as_kafka_does() -> None:
    mapper = PrincipalMapper.parse(["RULE:^CN=(.*)$/$1/"])
    with pytest.raises(NoRuleMatched, match="no principal mapping rule matches"):
        mapper.map("O=Acme")


@pytest.mark.parametrize("bad", ["RULE:^CN=(.*)$/$1", "RULE:(/x/Q", "NOPE", "RULE:([/x/"])
def test_bad_rules_are_refused(bad: str) -> None:
    with pytest.raises(PrincipalRuleError):
        PrincipalMapper.parse([bad])


def test_principal_from_a_certificate(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    issued = ca.issue("c", "Alice", org="Acme", hosts=("alice.example",),
                      emails=("alice@example.com",))
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    der = x509.load_pem_x509_certificate(issued.cert.read_bytes()).public_bytes(Encoding.DER)
    assert tls_principal(der, "subject", None) == "User:CN=Alice,O=Acme"
    rules = PrincipalMapper.parse(["RULE:^CN=([^,]+),.*$/$1/L"])
    assert tls_principal(der, "subject", rules) == "User:alice"
    assert tls_principal(der, "san:dns", None) == "User:alice.example"
    assert tls_principal(der, "san:email", None) == "User:alice@example.com"
    assert tls_principal(der, "san:uri", None) is None


# ---- SASL mechanism messages -------------------------------------------------------------


def test_plain() -> None:
    assert plain_user(plain_message("alice", "pw")) == "alice"
    assert plain_user(b"alice\0alice\0pw") == "alice"
    with pytest.raises(SaslError):
        plain_user(b"no separators")


def test_scram_user_names_are_unescaped() -> None:
    assert scram_user(b"n,,n=al=2Cice=3D,r=abc") == "al,ice="
    assert scram_user(b"n,a=admin,n=bob,r=abc") == "bob"
    with pytest.raises(SaslError):
        scram_user(b"garbage")


def test_scram_client_against_the_rfc_7677_example() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    final = client.final(server_first)
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert is_scram_client_final(final)
    client.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(SaslError, match="does not verify"):
        client.verify(b"v=AAAA")
    with pytest.raises(SaslError, match="refused"):
        client.verify(b"e=invalid-proof")


def test_scram_server_with_a_foreign_nonce_is_refused() -> None:
    client = ScramClient("SCRAM-SHA-512", "user", "pencil", nonce="abc")
    with pytest.raises(SaslError, match="foreign nonce"):
        client.final(b"r=xyz123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")


def _jwt(claims: dict) -> str:
    def part(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part(claims)}."


def test_oauthbearer_principal_from_the_configured_claim() -> None:
    message = oauthbearer_message(_jwt({"sub": "svc-1", "client_id": "orders"}))
    assert oauthbearer_principal(message) == "svc-1"
    assert oauthbearer_principal(message, "client_id") == "orders"
    with pytest.raises(SaslError, match="no 'azp' claim"):
        oauthbearer_principal(message, "azp")
    with pytest.raises(SaslError):
        oauthbearer_principal(b"n,,\x01auth=Bearer not-a-jwt\x01\x01")


# ---- configuration -------------------------------------------------------------------------


def _base(**sections: dict) -> dict:
    doc = {"upstream": {"bootstrap": "127.0.0.1:9092"},
           "listen": {"bootstrap": "127.0.0.1:19092"}}
    for key, value in sections.items():
        doc[key].update(value)
    return doc


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, str]:
    ca = CertificateAuthority(tmp_path / "ca")
    server = ca.issue("server", "herald", hosts=("127.0.0.1",))
    other = ca.issue("other", "other")
    (tmp_path / "password").write_text("hunter2\n")
    (tmp_path / "garbage.pem").write_text("not a certificate\n")
    return {"ca": str(ca.pem), "cert": str(server.cert), "key": str(server.key),
            "other_key": str(other.key), "password": str(tmp_path / "password"),
            "garbage": str(tmp_path / "garbage.pem"), "missing": str(tmp_path / "nope.pem")}


def test_a_full_security_configuration(pki: dict[str, str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_USER", "herald")
    config = parse_config(_base(
        upstream={"tls": {"ca_file": pki["ca"], "server_name": "kafka.example"},
                  "sasl": {"mechanism": "scram-sha-512", "username": {"env": "KAFKA_USER"},
                           "password": {"file": pki["password"]}}},
        listen={"tls": {"cert_file": pki["cert"], "key_file": pki["key"],
                        "client_ca_file": pki["ca"],
                        "principal_mapping_rules": ["RULE:^CN=(.*?),.*$/$1/", "DEFAULT"]}},
    ))
    assert config.upstream.sasl.mechanism == "SCRAM-SHA-512"
    assert config.upstream.sasl.username.read() == "herald"
    assert config.upstream.sasl.password.read() == "hunter2"  # newline stripped
    assert "hunter2" not in repr(config)
    assert config.listen.tls.client_auth == "required"  # a client CA means mTLS
    assert config.upstream.tls.server_name == "kafka.example"


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        ({"listen": {"tls": {"cert_file": "{missing}", "key_file": "{key}"}}},
         r"^listen\.tls\.cert_file: cannot read .*nope\.pem \(No such file"),
        ({"listen": {"tls": {"cert_file": "{cert}"}}}, r"^listen\.tls\.key_file: required"),
        ({"listen": {"tls": {"cert_file": "{cert}", "key_file": "{other_key}"}}},
         r"^listen\.tls: cert_file .* and key_file .* are not a usable certificate"),
        ({"listen": {"tls": {"cert_file": "{cert}", "key_file": "{key}",
                             "client_auth": "required"}}},
         r"^listen\.tls\.client_auth: 'required' needs client_ca_file"),
        ({"listen": {"tls": {"cert_file": "{cert}", "key_file": "{key}",
                             "min_version": "1.0"}}}, r"^listen\.tls\.min_version: expected"),
        ({"listen": {"tls": {"cert_file": "{cert}", "key_file": "{key}",
                             "principal_mapping_rules": ["RULE:x"]}}},
         r"^listen\.tls\.principal_mapping_rules: \[0\]: expected DEFAULT or RULE"),
        ({"upstream": {"tls": {"ca_file": "{garbage}"}}},
         r"^upstream\.tls\.ca_file: .*garbage\.pem is not a PEM CA bundle"),
        ({"upstream": {"tls": {"cert_file": "{cert}"}}},
         r"^upstream\.tls: cert_file and key_file go together"),
        ({"upstream": {"sasl": {"mechanism": "GSSAPI"}}},
         r"^upstream\.sasl\.mechanism: expected one of PLAIN, SCRAM-SHA-256"),
        ({"upstream": {"sasl": {"mechanism": "PLAIN", "username": "alice",
                                "password": {"file": "{password}"}}}},
         r"^upstream\.sasl\.username: expected \{file: PATH\} or \{env: VARIABLE\} \(secrets"),
        ({"upstream": {"sasl": {"mechanism": "PLAIN", "username": {"env": "HERALD_NO_SUCH_VAR"},
                                "password": {"file": "{password}"}}}},
         r"^upstream\.sasl\.username\.env: environment variable HERALD_NO_SUCH_VAR is not set"),
        ({"upstream": {"sasl": {"mechanism": "PLAIN", "username": {"file": "{password}"},
                                "password": {"file": "{missing}"}}}},
         r"^upstream\.sasl\.password\.file: cannot read .*nope\.pem"),
        ({"upstream": {"sasl": {"mechanism": "OAUTHBEARER"}}},
         r"^upstream\.sasl\.token: required"),
        ({"upstream": {"sasl": {"mechanism": "PLAIN", "username": {"file": "{password}"},
                                "password": {"file": "{password}", "env": "X"}}}},
         r"^upstream\.sasl\.password: expected exactly one of file, env"),
        ({"admin": {"token": {"file": "{missing}"}}}, r"^admin\.token\.file: cannot read"),
    ],
)
def test_security_errors_name_the_yaml_path_and_file(
    pki: dict[str, str], sections: dict, message: str
) -> None:
    def fill(value: object) -> object:
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, str):
            return value.format(**pki)
        return value

    doc = _base(**{k: fill(v) for k, v in sections.items() if k != "admin"})
    if "admin" in sections:
        doc["admin"] = fill(sections["admin"])
    with pytest.raises(ConfigError, match=message) as info:
        parse_config(doc)
    assert "hunter2" not in str(info.value)


def test_injection_listens_on_loopback_unless_told_otherwise(pki: dict[str, str]) -> None:
    sasl = {"mechanism": "PLAIN", "username": {"file": pki["password"]},
            "password": {"file": pki["password"]}}
    doc = _base(upstream={"sasl": sasl}, listen={"bootstrap": "0.0.0.0:19092"})
    with pytest.raises(ConfigError, match=r"^listen\.bootstrap: with upstream\.sasl set"):
        parse_config(doc)
    doc["listen"]["allow_unauthenticated_clients"] = True
    assert parse_config(doc).listen.allow_unauthenticated_clients
    loopback = _base(upstream={"sasl": sasl}, listen={"bootstrap": "[::1]:19092"})
    assert parse_config(loopback).upstream.sasl is not None


def test_every_bad_security_key_is_reported_and_no_context_is_built_from_bad_files(
    pki: dict[str, str],
) -> None:
    doc = _base(
        upstream={"sasl": {"mechanism": "PLAIN", "username": "alice",
                           "password": {"file": pki["missing"]}}},
        listen={"tls": {"cert_file": pki["missing"], "key_file": pki["missing"],
                        "client_auth": "required", "min_version": "1.0"}},
    )
    with pytest.raises(ConfigError) as info:
        parse_config(doc)
    assert [e.split(":")[0] for e in info.value.errors] == [
        "upstream.sasl.username", "upstream.sasl.password.file", "listen.tls.cert_file",
        "listen.tls.key_file", "listen.tls.client_auth", "listen.tls.min_version"]
