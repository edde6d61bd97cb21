"""The message model the generator works from: two Kafka spec sets merged into one.

Kafka 4.x removed old versions of several APIs (KIP-896) that 3.9 brokers still accept, so a
message's versions are the union of the valid versions in the newest and the legacy spec. Each
version is described by exactly one spec: the newest one when it covers that version, the legacy
one otherwise. A generated class carries the union of the fields of both specs; for one version
only the fields of the governing spec travel on the wire and the rest keep their defaults.

Everything the emitter and the tests need per version is computed here as a *layout*: which
fields are present, in wire order, with their nullability, tag and compactness in that version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from protocol.codegen.jars import KafkaLibs, read_specs
from protocol.kafka_versions import KAFKA_LEGACY_VERSION, KAFKA_VERSION

#: The messages Herald decodes, by spec name stem (request and response of each).
APIS = (
    "ApiVersions",
    "Metadata",
    "Produce",
    "Fetch",
    "FindCoordinator",
    "DescribeCluster",
    "SaslHandshake",
    "SaslAuthenticate",
    # The consumer-group APIs: read (never changed) to learn which group a client belongs to.
    "OffsetCommit",
    "OffsetFetch",
    "JoinGroup",
    "Heartbeat",
    "LeaveGroup",
    "SyncGroup",
    "ConsumerGroupHeartbeat",
    # Share groups (KIP-932): the heartbeat names the group; ShareFetch responses carry records
    # the fetch chain reads, and both they and ShareAcknowledge responses broker addresses.
    "ShareGroupHeartbeat",
    "ShareFetch",
    "ShareAcknowledge",
)
HEADERS = ("RequestHeader", "ResponseHeader")

FIXED_SIZES = {
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint16": 2,
    "uint32": 4,
    "float64": 8,
    "bool": 1,
    "uuid": 16,
}
VARIABLE_TYPES = ("string", "bytes", "records")
RESERVED_NAMES = {"unknown_tagged_fields", "encode", "encode_into", "decode", "decode_from"}

_UNBOUNDED = 0x7FFF


class SpecError(Exception):
    """A spec uses something the generator does not support, or the two specs disagree."""


@dataclass(frozen=True)
class Versions:
    lo: int
    hi: int

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text.strip() == "none":
            return NO_VERSIONS
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), _UNBOUNDED)
        if "-" in text:
            lo, hi = text.split("-")
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.lo <= version <= self.hi

    @property
    def empty(self) -> bool:
        return self.lo > self.hi

    def range(self) -> range:
        return range(self.lo, self.hi + 1)

    def __str__(self) -> str:
        if self.empty:
            return "none"
        if self.hi == _UNBOUNDED:
            return f"{self.lo}+"
        return f"{self.lo}-{self.hi}" if self.lo != self.hi else str(self.lo)


NO_VERSIONS = Versions(0, -1)


def snake_case(name: str) -> str:
    """``ThrottleTimeMs`` -> ``throttle_time_ms``."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    return s.lower()


def camel_case(name: str) -> str:
    """Kafka JsonConverter field names: ``ThrottleTimeMs`` -> ``throttleTimeMs``."""
    return name[:1].lower() + name[1:]


# --------------------------------------------------------------------------- one spec file


@dataclass
class FieldSpec:
    name: str
    type: str
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: str | None
    ignorable: bool
    flexible_override: Versions | None
    about: str
    struct: StructSpec | None

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type


@dataclass
class StructSpec:
    name: str
    fields: list[FieldSpec]


@dataclass
class MessageSpec:
    name: str
    kind: str
    api_key: int | None
    valid: Versions
    flexible: Versions
    latest_unstable: bool
    listeners: tuple[str, ...]
    top: StructSpec
    structs: dict[str, StructSpec]


def _parse_fields(
    raw_fields: list[dict[str, Any]],
    common: dict[str, dict[str, Any]],
    structs: dict[str, StructSpec],
    owner: str,
) -> list[FieldSpec]:
    fields = []
    for raw in raw_fields:
        ftype = raw["type"]
        element = ftype[2:] if ftype.startswith("[]") else ftype
        struct = None
        if "fields" in raw:
            struct = _parse_struct(element, raw["fields"], common, structs)
        elif element not in FIXED_SIZES and element not in VARIABLE_TYPES:
            if element not in common:
                raise SpecError(f"{owner}.{raw['name']}: unknown type {ftype}")
            struct = _parse_struct(element, common[element]["fields"], common, structs)
        tag = raw.get("tag")
        fields.append(
            FieldSpec(
                name=raw["name"],
                type=ftype,
                versions=Versions.parse(raw.get("versions")),
                nullable=Versions.parse(raw.get("nullableVersions")),
                tagged=Versions.parse(raw.get("taggedVersions")),
                tag=int(tag) if tag is not None else None,
                default=str(raw["default"]) if "default" in raw else None,
                ignorable=bool(raw.get("ignorable", False)),
                flexible_override=(
                    Versions.parse(raw["flexibleVersions"]) if "flexibleVersions" in raw else None
                ),
                about=raw.get("about", ""),
                struct=struct,
            )
        )
    return fields


def _parse_struct(
    name: str,
    raw_fields: list[dict[str, Any]],
    common: dict[str, dict[str, Any]],
    structs: dict[str, StructSpec],
) -> StructSpec:
    if name in structs:
        return structs[name]
    struct = StructSpec(name, [])
    structs[name] = struct
    struct.fields = _parse_fields(raw_fields, common, structs, name)
    return struct


def parse_message_spec(raw: dict[str, Any]) -> MessageSpec:
    common = {c["name"]: c for c in raw.get("commonStructs", [])}
    structs: dict[str, StructSpec] = {}
    top = StructSpec(raw["name"], [])
    top.fields = _parse_fields(raw.get("fields", []), common, structs, raw["name"])
    return MessageSpec(
        name=raw["name"],
        kind=raw["type"],
        api_key=raw.get("apiKey"),
        valid=Versions.parse(raw.get("validVersions")),
        flexible=Versions.parse(raw.get("flexibleVersions")),
        latest_unstable=bool(raw.get("latestVersionUnstable", False)),
        listeners=tuple(raw.get("listeners", ())),
        top=top,
        structs=structs,
    )


# --------------------------------------------------------------------------- merged classes


@dataclass(frozen=True)
class StructDefault:
    """Default of a non-tagged struct field: a fresh instance of ``name`` with its defaults."""

    name: str


class _EmptyList:
    def __repr__(self) -> str:
        return "[]"


EMPTY_LIST: Any = _EmptyList()


@dataclass
class ClassField:
    """One attribute of a generated class (the union over every version and both specs)."""

    py_name: str
    spec_name: str
    json_name: str
    type: str
    struct_name: str | None
    default: Any
    nullable_any: bool
    tagged_any: bool
    tag: int | None
    about: str

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type


@dataclass
class ClassDef:
    name: str
    fields: list[ClassField] = field(default_factory=list)

    @property
    def tags(self) -> tuple[int, ...]:
        """Every tag a field of this struct uses in some version."""
        return tuple(sorted(f.tag for f in self.fields if f.tag is not None))

    def get(self, py_name: str) -> ClassField:
        for f in self.fields:
            if f.py_name == py_name:
                return f
        raise KeyError(py_name)


def _default_value(f: FieldSpec, tagged_any: bool) -> Any:
    t = f.element_type
    d = f.default
    if f.is_array:
        if d is None or d == "":
            return EMPTY_LIST
        if d == "null":
            return None
        raise SpecError(f"{f.name}: unsupported array default {d!r}")
    if f.struct is not None:
        if d == "null" and not f.nullable.empty:  # a nullable struct: absent is None
            return None
        if d is not None:
            raise SpecError(f"{f.name}: struct fields cannot have a default")
        return None if tagged_any else StructDefault(f.struct.name)
    if t in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return 0 if d is None else int(d, 0)
    if t == "float64":
        return 0.0 if d is None else float(d)
    if t == "bool":
        if d is None:
            return False
        if d not in ("true", "false"):
            raise SpecError(f"{f.name}: bad bool default {d!r}")
        return d == "true"
    if t == "string":
        if d == "null":
            return None
        return "" if d is None else d
    if t == "uuid":
        if d not in (None, ""):
            raise SpecError(f"{f.name}: uuid defaults are not supported")
        return bytes(16)
    if t == "bytes":
        if d == "null":
            return None
        if d not in (None, ""):
            raise SpecError(f"{f.name}: bytes defaults are not supported")
        return b""
    if t == "records":
        return None
    raise SpecError(f"{f.name}: unsupported type {f.type}")


def _class_field(f: FieldSpec) -> ClassField:
    py_name = snake_case(f.name)
    if py_name in RESERVED_NAMES or not py_name.isidentifier():
        raise SpecError(f"field {f.name} maps to a reserved name {py_name}")
    tagged_any = not f.tagged.empty
    return ClassField(
        py_name=py_name,
        spec_name=f.name,
        json_name=camel_case(f.name),
        type=f.type,
        struct_name=f.struct.name if f.struct else None,
        default=_default_value(f, tagged_any),
        nullable_any=not f.nullable.empty or f.default == "null",
        tagged_any=tagged_any,
        tag=f.tag,
        about=f.about,
    )


def _merge_field(existing: ClassField, other: ClassField, owner: str) -> None:
    if existing.type != other.type:
        raise SpecError(f"{owner}.{existing.spec_name}: type {existing.type} vs {other.type}")
    existing.nullable_any = existing.nullable_any or other.nullable_any
    if other.tagged_any != existing.tagged_any or other.tag != existing.tag:
        raise SpecError(f"{owner}.{existing.spec_name}: tagged differently in the two specs")


# --------------------------------------------------------------------------- layouts


@dataclass
class FieldLayout:
    """How one attribute travels in one version."""

    cf: ClassField
    kind: str  # a FIXED_SIZES key, "string", "bytes", "records", "array" or "struct"
    element: str | None  # for arrays: a FIXED_SIZES key, "string", "bytes" or "struct"
    struct: StructLayout | None
    nullable: bool
    tag: int | None
    compact: bool


@dataclass
class StructLayout:
    """The wire layout of one struct (or the message itself) in one version."""

    name: str
    flexible: bool
    fields: list[FieldLayout]
    absent: list[tuple[ClassField, bool]]  # (attribute, ignorable)
    class_tags: tuple[int, ...] = ()  # tags of this struct's fields in any version
    _sig: tuple[Any, ...] | None = None

    @property
    def wire_fields(self) -> list[FieldLayout]:
        return [f for f in self.fields if f.tag is None]

    @property
    def tagged_fields(self) -> list[FieldLayout]:
        return sorted((f for f in self.fields if f.tag is not None), key=lambda f: f.tag or 0)

    def signature(self) -> tuple[Any, ...]:
        if self._sig is None:
            self._sig = (
                self.name,
                self.flexible,
                tuple(
                    (
                        f.cf.py_name,
                        f.kind,
                        f.element,
                        f.nullable,
                        f.tag,
                        f.compact,
                        f.struct.signature() if f.struct else None,
                    )
                    for f in self.fields
                ),
                tuple((cf.py_name, ignorable) for cf, ignorable in self.absent),
                self.class_tags,
            )
        return self._sig

    def min_size(self) -> int:
        """The fewest bytes an instance of this layout can occupy on the wire."""
        total = 1 if self.flexible else 0
        for f in self.wire_fields:
            total += field_min_size(f)
        return total


def field_min_size(f: FieldLayout) -> int:
    if f.kind in FIXED_SIZES:
        return FIXED_SIZES[f.kind]
    if f.kind == "struct":
        assert f.struct is not None
        return f.struct.min_size()
    if f.compact:
        return 1
    return 2 if f.kind == "string" else 4


def element_min_size(f: FieldLayout) -> int:
    """The fewest bytes one element of the array ``f`` can occupy (at least 1)."""
    e = f.element
    if e in FIXED_SIZES:
        return FIXED_SIZES[e]
    if e == "struct":
        assert f.struct is not None
        return max(1, f.struct.min_size())
    if f.compact:
        return 1
    return 2 if e == "string" else 4


# --------------------------------------------------------------------------- merged message


@dataclass
class Message:
    name: str
    kind: str
    api_key: int | None
    versions: list[int]
    newest: MessageSpec
    legacy: MessageSpec | None
    classes: dict[str, ClassDef]

    @property
    def module_name(self) -> str:
        return snake_case(self.name)

    @property
    def min_version(self) -> int:
        return self.versions[0]

    @property
    def max_version(self) -> int:
        return self.versions[-1]

    def spec_for(self, version: int) -> MessageSpec:
        if version in self.newest.valid:
            return self.newest
        if self.legacy is not None and version in self.legacy.valid:
            return self.legacy
        raise KeyError(f"{self.name} has no version {version}")

    def is_flexible(self, version: int) -> bool:
        return version in self.spec_for(version).flexible

    @property
    def flexible_min_version(self) -> int | None:
        flexible = [v for v in self.versions if self.is_flexible(v)]
        return flexible[0] if flexible else None

    def layout(self, version: int) -> StructLayout:
        spec = self.spec_for(version)
        other = self.legacy if spec is self.newest else self.newest
        flexible = version in spec.flexible
        return self._struct_layout(self.name, spec.top, other, version, flexible)

    def _struct_layout(
        self,
        name: str,
        struct: StructSpec,
        other: MessageSpec | None,
        version: int,
        flexible: bool,
    ) -> StructLayout:
        cls = self.classes[name]
        present: list[FieldLayout] = []
        by_name = {snake_case(f.name): f for f in struct.fields}
        for f in struct.fields:
            if version not in f.versions:
                continue
            cf = cls.get(snake_case(f.name))
            compact = flexible and (f.flexible_override is None or version in f.flexible_override)
            tag = f.tag if version in f.tagged else None
            if tag is not None and not flexible:
                raise SpecError(f"{name}.{f.name}: tagged in non-flexible version {version}")
            sub = None
            if f.struct is not None:
                sub = self._struct_layout(f.struct.name, f.struct, other, version, flexible)
            nullable = version in f.nullable
            if f.is_array:
                kind = "array"
                element = "struct" if f.struct else f.element_type
                if element == "records":
                    raise SpecError(f"{name}.{f.name}: arrays of records are not supported")
            else:
                kind = "struct" if f.struct else f.type
                element = None
                if kind == "struct" and nullable and tag is not None:
                    raise SpecError(f"{name}.{f.name}: tagged nullable structs are not supported")
            present.append(FieldLayout(cf, kind, element, sub, nullable, tag, compact))
        absent = []
        other_struct = None
        if other is not None:
            other_struct = other.top if name == self.name else other.structs.get(name)
        other_by_name = {snake_case(f.name): f for f in other_struct.fields} if other_struct else {}
        present_names = {f.cf.py_name for f in present}
        for cf in cls.fields:
            if cf.py_name in present_names:
                continue
            spec_field = by_name.get(cf.py_name) or other_by_name.get(cf.py_name)
            ignorable = spec_field.ignorable if spec_field is not None else True
            absent.append((cf, ignorable))
        return StructLayout(name, flexible, present, absent, cls.tags)


def _collect_classes(specs: list[MessageSpec]) -> dict[str, ClassDef]:
    classes: dict[str, ClassDef] = {}

    def visit(struct: StructSpec) -> None:
        cls = classes.setdefault(struct.name, ClassDef(struct.name))
        for f in struct.fields:
            cf = _class_field(f)
            try:
                _merge_field(cls.get(cf.py_name), cf, struct.name)
            except KeyError:
                cls.fields.append(cf)
            if f.struct is not None:
                visit(f.struct)

    for spec in specs:
        visit(spec.top)
    return classes


def merge(newest: MessageSpec, legacy: MessageSpec | None) -> Message:
    versions = set(newest.valid.range())
    if legacy is not None:
        versions |= set(legacy.valid.range())
    specs = [newest] + ([legacy] if legacy is not None else [])
    msg = Message(
        name=newest.name,
        kind=newest.kind,
        api_key=newest.api_key,
        versions=sorted(versions),
        newest=newest,
        legacy=legacy,
        classes=_collect_classes(specs),
    )
    for v in msg.versions:
        msg.layout(v)  # validates every version up front
    return msg


@cache
def spec_sets(libs: KafkaLibs) -> tuple[dict[str, MessageSpec], dict[str, MessageSpec]]:
    """The parsed specs of KAFKA_VERSION and KAFKA_LEGACY_VERSION."""
    newest = {k: parse_message_spec(v) for k, v in read_specs(libs, KAFKA_VERSION).items()}
    legacy = {
        k: parse_message_spec(v) for k, v in read_specs(libs, KAFKA_LEGACY_VERSION).items()
    }
    return newest, legacy


def message_names() -> list[str]:
    names = []
    for api in APIS:
        names += [api + "Request", api + "Response"]
    return names + list(HEADERS)


@cache
def load_messages(libs: KafkaLibs) -> dict[str, Message]:
    """Every generated message (requests, responses and headers), merged, by name."""
    newest, legacy = spec_sets(libs)
    return {name: merge(newest[name], legacy.get(name)) for name in message_names()}


@dataclass(frozen=True)
class ApiKeyRow:
    api_key: int
    name: str
    min_version: int | None
    max_version: int | None
    flexible_min_version: int | None
    latest_version_unstable: bool
    legacy_min_version: int | None
    legacy_max_version: int | None


def api_key_rows(libs: KafkaLibs) -> list[ApiKeyRow]:
    """One row per API key in the newest spec (plus any the legacy spec alone still has)."""
    newest, legacy = spec_sets(libs)

    def requests(specs: dict[str, MessageSpec]) -> dict[int, MessageSpec]:
        return {
            s.api_key: s for s in specs.values() if s.kind == "request" and s.api_key is not None
        }

    new_req, old_req = requests(newest), requests(legacy)
    rows = []
    for key in sorted(set(new_req) | set(old_req)):
        n = new_req.get(key)
        o = old_req.get(key)
        name = (n or o).name.removesuffix("Request")  # type: ignore[union-attr]
        flexible = None
        for s in (n, o):
            if s is not None and not s.flexible.empty and not s.valid.empty:
                flexible = s.flexible.lo
                break
        rows.append(
            ApiKeyRow(
                api_key=key,
                name=name,
                min_version=None if n is None or n.valid.empty else n.valid.lo,
                max_version=None if n is None or n.valid.empty else n.valid.hi,
                flexible_min_version=flexible,
                latest_version_unstable=bool(n and n.latest_unstable),
                legacy_min_version=None if o is None or o.valid.empty else o.valid.lo,
                legacy_max_version=None if o is None or o.valid.empty else o.valid.hi,
            )
        )
    return rows
