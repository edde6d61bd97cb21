"""Herald's codecs against Apache Kafka's own, message by message and version by version.

``ReferenceCodec.java`` (next to this file) is compiled with ``javac`` against the kafka-clients
jar into ``.cache/differential/<hash of source and Kafka version>/`` and run once per Kafka
release for the whole module. For every API and version Herald generates, hypothesis builds
messages and the test checks that

* Kafka (reading the message from its JsonConverter JSON) writes exactly Herald's bytes;
* Kafka decodes Herald's bytes to the same message, consuming all of them, and writes them back
  unchanged -- also with unknown tagged fields, which JSON cannot carry;
* the request/response header versions Herald picks are Kafka's, for every API key.

Versions that only Kafka 3.9 still accepts (KIP-896) are checked against 3.9's classes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.api_keys import API_KEYS
from protocol.codegen.model import FieldLayout, StructLayout
from protocol.frame_headers import request_header_version, response_header_version
from protocol.kafka_versions import KAFKA_LEGACY_VERSION, KAFKA_VERSION
from proxy.devtools.codegen import load_messages
from proxy.devtools.kafka_dist import kafka_libs as kafka_libs_dir
from tests.support.message_strategies import all_message_versions, message_strategy, module_for

REPO = pathlib.Path(__file__).resolve().parents[3]
SOURCE = pathlib.Path(__file__).with_name("ReferenceCodec.java")
EXAMPLES = int(os.environ.get("HERALD_DIFFERENTIAL_EXAMPLES", "8"))
DIFFERENTIAL = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CASES = all_message_versions()
IDS = [f"{name}-v{v}" for name, v in CASES]


# --------------------------------------------------------------------------- the JVM


def compiled_classes() -> pathlib.Path:
    """Compile ReferenceCodec.java once per (source, Kafka version); reuse it afterwards."""
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source + KAFKA_VERSION.encode()).hexdigest()[:16]
    target = REPO / ".cache" / "differential" / digest
    if (target / "ReferenceCodec.class").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(dir=target.parent))
    classpath = str(kafka_libs_dir(KAFKA_VERSION) / "*")
    subprocess.run(
        ["javac", "-nowarn", "-cp", classpath, "-d", str(staging), str(SOURCE)],
        check=True,
        capture_output=True,
    )
    try:
        staging.rename(target)
    except OSError:  # compiled concurrently by another run
        shutil.rmtree(staging, ignore_errors=True)
    return target


class ReferenceJvm:
    """One long-lived JVM running ReferenceCodec on the jars of one Kafka release."""

    def __init__(self, kafka_version: str) -> None:
        classpath = os.pathsep.join(
            [str(compiled_classes()), str(kafka_libs_dir(kafka_version) / "*")]
        )
        self.kafka_version = kafka_version
        self.proc = subprocess.Popen(
            ["java", "-XX:TieredStopAtLevel=1", "-Xss4m", "-cp", classpath, "ReferenceCodec"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"reference JVM ({self.kafka_version}) exited")
        return json.loads(line)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Jvms:
    def __init__(self) -> None:
        self._jvms: dict[str, ReferenceJvm] = {}

    def get(self, kafka_version: str) -> ReferenceJvm:
        if kafka_version not in self._jvms:
            self._jvms[kafka_version] = ReferenceJvm(kafka_version)
        return self._jvms[kafka_version]

    def for_message(self, name: str, version: int) -> ReferenceJvm:
        msg = load_messages()[name]
        release = KAFKA_VERSION if msg.spec_for(version) is msg.newest else KAFKA_LEGACY_VERSION
        return self.get(release)

    def close(self) -> None:
        for jvm in self._jvms.values():
            jvm.close()


@pytest.fixture(scope="module")
def jvms() -> Iterator[Jvms]:
    pool = Jvms()
    try:
        yield pool
    finally:
        pool.close()


# --------------------------------------------------------------------------- JSON mapping


def _scalar_to_json(value: Any, kind: str) -> Any:
    if kind == "uuid":
        return base64.urlsafe_b64encode(bytes(value)).rstrip(b"=").decode()
    if kind in ("bytes", "records"):
        return base64.b64encode(bytes(value)).decode()
    return value


def _scalar_from_json(node: Any, kind: str) -> Any:
    if kind == "uuid":
        return base64.urlsafe_b64decode(node + "=" * (-len(node) % 4))
    if kind in ("bytes", "records"):
        return base64.b64decode(node)
    return node


def to_json(obj: Any, layout: StructLayout) -> dict[str, Any]:
    """A message as Kafka's JsonConverter reads it: camelCase names, base64 binaries."""
    node: dict[str, Any] = {}
    for f in layout.fields:
        value = getattr(obj, f.cf.py_name)
        if value is None and f.kind == "struct" and f.tag is not None:
            continue  # an absent tagged struct (a null nullable struct is written as null)
        node[f.cf.json_name] = _value_to_json(value, f)
    return node


def _value_to_json(value: Any, f: FieldLayout) -> Any:
    if value is None:
        return None
    if f.kind == "array":
        if f.element == "struct":
            assert f.struct is not None
            return [to_json(x, f.struct) for x in value]
        assert f.element is not None
        return [_scalar_to_json(x, f.element) for x in value]
    if f.kind == "struct":
        assert f.struct is not None
        return to_json(value, f.struct)
    return _scalar_to_json(value, f.kind)


def from_json(node: dict[str, Any], layout: StructLayout, module: Any, original: Any) -> Any:
    """The message Kafka's JSON describes. Kafka's JsonConverter does not write the content of
    ``records`` fields (it is meant for request logs), so those are taken from ``original``;
    the byte comparisons cover them."""
    kwargs = {}
    for f in layout.fields:
        if f.kind == "records":
            kwargs[f.cf.py_name] = getattr(original, f.cf.py_name, None)
        elif f.cf.json_name in node:
            before = getattr(original, f.cf.py_name, None)
            kwargs[f.cf.py_name] = _value_from_json(node[f.cf.json_name], f, module, before)
    return getattr(module, layout.name)(**kwargs)


def _value_from_json(node: Any, f: FieldLayout, module: Any, original: Any) -> Any:
    if node is None:
        return None
    if f.kind == "array":
        if f.element == "struct":
            assert f.struct is not None
            originals = list(original or []) + [None] * len(node)
            pairs = zip(node, originals, strict=False)
            return [from_json(x, f.struct, module, o) for x, o in pairs]
        assert f.element is not None
        return [_scalar_from_json(x, f.element) for x in node]
    if f.kind == "struct":
        assert f.struct is not None
        value = from_json(node, f.struct, module, original)
        if f.tag is not None and value == getattr(module, f.struct.name)():
            return None  # Herald represents an all-default tagged struct as None
        return value
    return _scalar_from_json(node, f.kind)


# --------------------------------------------------------------------------- tests


def check_against_kafka(jvm: ReferenceJvm, name: str, version: int, msg: Any) -> None:
    message = load_messages()[name]
    layout = message.layout(version)
    module = module_for(message)
    ours = msg.encode(version)

    if not msg_has_unknown_tags(msg):
        reply = jvm.call({"op": "encode", "message": name, "version": version,
                          "json": to_json(msg, layout)})
        assert "error" not in reply, reply["error"]
        assert reply["hex"] == ours.hex(), "Kafka writes different bytes"

    reply = jvm.call({"op": "decode", "message": name, "version": version, "hex": ours.hex()})
    assert "error" not in reply, reply["error"]
    assert reply["remaining"] == 0, "Kafka left bytes unread"
    assert reply["hex"] == ours.hex(), "Kafka does not write Herald's bytes back unchanged"
    if not msg_has_unknown_tags(msg):
        assert from_json(reply["json"], layout, module, msg) == msg
    assert getattr(module, name).decode(bytes.fromhex(reply["hex"]), version) == msg


def msg_has_unknown_tags(obj: Any) -> bool:
    if isinstance(obj, list):
        return any(msg_has_unknown_tags(x) for x in obj)
    slots = getattr(obj, "__slots__", None)
    if slots is None:
        return False
    if obj.unknown_tagged_fields:
        return True
    return any(msg_has_unknown_tags(getattr(obj, s)) for s in slots if s != "unknown_tagged_fields")


@pytest.mark.parametrize(("name", "version"), CASES, ids=IDS)
@DIFFERENTIAL
@given(data=st.data())
def test_same_bytes_as_kafka(jvms: Jvms, name: str, version: int, data: st.DataObject) -> None:
    msg = data.draw(message_strategy(name, version, unknown_tags=False))
    check_against_kafka(jvms.for_message(name, version), name, version, msg)


FLEXIBLE_CASES = [
    (name, v) for name, v in CASES if load_messages()[name].is_flexible(v)
]


@pytest.mark.parametrize(
    ("name", "version"), FLEXIBLE_CASES, ids=[f"{n}-v{v}" for n, v in FLEXIBLE_CASES]
)
@settings(DIFFERENTIAL, max_examples=max(2, EXAMPLES // 2))
@given(data=st.data())
def test_unknown_tags_survive_kafka(
    jvms: Jvms, name: str, version: int, data: st.DataObject
) -> None:
    msg = data.draw(message_strategy(name, version, unknown_tags=True))
    check_against_kafka(jvms.for_message(name, version), name, version, msg)


@pytest.mark.parametrize("release", [KAFKA_VERSION, KAFKA_LEGACY_VERSION])
def test_header_versions_match_kafka(jvms: Jvms, release: str) -> None:
    reply = jvms.get(release).call(
        {"op": "headers", "keys": sorted(API_KEYS), "maxVersion": 40}
    )
    assert "error" not in reply, reply.get("error")
    checked = 0
    for api_key, version, request_v, response_v in reply["versions"]:
        info = API_KEYS[api_key]
        if release == KAFKA_VERSION:
            lo, hi = info.min_version, info.max_version
        else:
            lo, hi = info.legacy_min_version, info.legacy_max_version
        if lo is None or hi is None or not lo <= version <= hi:
            continue
        assert request_header_version(api_key, version) == request_v, (api_key, version)
        assert response_header_version(api_key, version) == response_v, (api_key, version)
        checked += 1
    assert checked > 300
