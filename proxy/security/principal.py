"""The principal of a client: from its TLS certificate, by rules in Kafka's own syntax.

Kafka names an mTLS client by its certificate's subject (RFC 2253 form) and lets operators
shorten it with `ssl.principal.mapping.rules`: `RULE:pattern/replacement/[LU]` entries and
`DEFAULT`, tried in order, the first whose pattern matches the whole name wins. Herald reads
the same rules so that the principal in the audit headers is the one the brokers' ACLs use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cryptography import x509

KAFKA_USER = "User:"

# The subject alternative names a principal can come from: each of these reads as text.
_TextName = type[x509.DNSName] | type[x509.UniformResourceIdentifier] | type[x509.RFC822Name]


class PrincipalRuleError(ValueError):
    """A mapping rule that does not parse."""


class NoRuleMatched(ValueError):
    """No rule applies to a name (Kafka refuses such a client too)."""


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        match = self.pattern.fullmatch(name)
        if match is None:
            return None
        result = match.expand(self.replacement)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


# RULE:<pattern>/<replacement>/<flags>, where / may be escaped as \/ in both parts.
_RULE = re.compile(r"RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)")
_JAVA_GROUP = re.compile(r"\$(\d+)")


@dataclass(frozen=True)
class PrincipalMapper:
    rules: tuple[_Rule, ...]

    @classmethod
    def parse(cls, rules: list[str]) -> PrincipalMapper:
        parsed = []
        for i, text in enumerate(rules):
            text = text.strip()
            if text == "DEFAULT":
                parsed.append(_Rule(None))
                continue
            m = _RULE.fullmatch(text)
            if m is None:
                raise PrincipalRuleError(
                    f"[{i}]: expected DEFAULT or RULE:pattern/replacement/[LU], got {text!r}"
                )
            pattern = m.group(1).replace("\\/", "/")
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise PrincipalRuleError(f"[{i}]: bad pattern {pattern!r}: {exc}") from None
            # Java writes group references as $1; Python's expand wants \g<1>.
            replacement = _JAVA_GROUP.sub(r"\\g<\1>", m.group(2).replace("\\/", "/"))
            parsed.append(_Rule(compiled, replacement, m.group(3)))
        if not parsed:
            raise PrincipalRuleError("expected at least one rule")
        return cls(tuple(parsed))

    def map(self, name: str) -> str:
        for rule in self.rules:
            result = rule.apply(name)
            if result is not None:
                return result
        raise NoRuleMatched(f"no principal mapping rule matches {name!r}")


def certificate_name(der: bytes, source: str = "subject") -> str | None:
    """The name a certificate gives for `source`: its subject in RFC 2253 form (Kafka's
    default), or its first DNS, URI or email subject alternative name."""
    cert = x509.load_der_x509_certificate(der)
    if source == "subject":
        return cert.subject.rfc4514_string()
    kinds: dict[str, _TextName] = {"san:dns": x509.DNSName,
                                   "san:uri": x509.UniformResourceIdentifier,
                                   "san:email": x509.RFC822Name}
    kind = kinds[source]
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return None
    names = san.value.get_values_for_type(kind)
    return names[0] if names else None


def tls_principal(der: bytes, source: str, mapper: PrincipalMapper | None) -> str | None:
    """`User:<name>` for a client certificate, or None when it has no such name."""
    name = certificate_name(der, source)
    if name is None:
        return None
    if mapper is not None:
        name = mapper.map(name)
    return KAFKA_USER + name
