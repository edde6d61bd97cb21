"""Where the generator's inputs come from: the jars of the pinned Kafka releases.

The message specs are the JSON files under ``common/message/`` inside the ``kafka-clients``
jar. They carry ``//`` comments, which are stripped (outside string literals) before parsing.
The error codes are not in the specs: they are the ``Errors`` enum of the same jar, printed by
``ErrorCodes.java`` (next to this file), which the JVM runs straight from its source.

The generator only reads jars that are already on disk, from the folders it is given
(``KafkaLibs``): ``protocol`` imports nothing of Herald's, so fetching the jars is the dev
tools' job (``python -m proxy.devtools.codegen`` fetches them with Maven and runs this).
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import zipfile
from dataclasses import dataclass
from functools import cache
from typing import Any, NamedTuple

from protocol.kafka_versions import KAFKA_LEGACY_VERSION, KAFKA_VERSION

ERROR_CODES_SOURCE = pathlib.Path(__file__).with_name("ErrorCodes.java")


@dataclass(frozen=True)
class KafkaLibs:
    """The folders holding the runtime jars (kafka-clients and what it needs) of
    ``KAFKA_VERSION`` (``newest``) and ``KAFKA_LEGACY_VERSION`` (``legacy``)."""

    newest: pathlib.Path
    legacy: pathlib.Path

    def folder(self, version: str) -> pathlib.Path:
        folders = {KAFKA_VERSION: self.newest, KAFKA_LEGACY_VERSION: self.legacy}
        if version not in folders:
            raise ValueError(f"Kafka {version} is not one of the pinned releases")
        return folders[version]

    def clients_jar(self, version: str) -> pathlib.Path:
        path = self.folder(version) / f"kafka-clients-{version}.jar"
        if not path.is_file():
            raise FileNotFoundError(f"kafka-clients jar for {version} not found at {path}")
        return path


def strip_comments(text: str) -> str:
    """Remove ``//`` line comments and ``/* */`` block comments that are outside strings."""
    out: list[str] = []
    i = 0
    n = len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_string = False
            i += 1
        elif c == '"':
            in_string = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def read_specs(libs: KafkaLibs, version: str) -> dict[str, dict[str, Any]]:
    """All message specs of Kafka ``version``, keyed by spec name (e.g. ``FetchRequest``)."""
    specs: dict[str, dict[str, Any]] = {}
    with zipfile.ZipFile(libs.clients_jar(version)) as jar:
        for name in sorted(jar.namelist()):
            if name.startswith("common/message/") and name.endswith(".json"):
                spec = json.loads(strip_comments(jar.read(name).decode("utf-8")))
                specs[spec["name"]] = spec
    return specs


class ErrorCode(NamedTuple):
    """One constant of Kafka's ``Errors`` enum."""

    code: int
    name: str
    retriable: bool  # its exception is a RetriableException: clients try again by themselves
    message: str  # the exception's default message


def parse_error_codes(text: str) -> list[ErrorCode]:
    """The lines ``ErrorCodes.java`` prints (code, name, retriable, message; tab-separated)."""
    errors = []
    for line in text.splitlines():
        code, name, retriable, message = line.split("\t", 3)
        if not name.isidentifier() or retriable not in ("true", "false"):
            raise ValueError(f"unexpected line from ErrorCodes.java: {line!r}")
        errors.append(ErrorCode(int(code), name, retriable == "true", message))
    if not errors or len({e.code for e in errors}) != len(errors):
        raise ValueError("ErrorCodes.java printed no codes, or one code twice")
    return errors


@cache
def read_error_codes(libs: KafkaLibs, version: str) -> tuple[ErrorCode, ...]:
    """Every error code of Kafka ``version``, in the order of its ``Errors`` enum.

    Needs ``java`` (11 or later: a single-file source program) on the PATH.
    """
    classpath = str(libs.clients_jar(version).parent / "*")
    result = subprocess.run(
        ["java", "-cp", classpath, str(ERROR_CODES_SOURCE)],
        capture_output=True, text=True, encoding="utf-8",
    )
    if result.returncode != 0:
        raise RuntimeError(f"ErrorCodes.java failed on Kafka {version}:\n{result.stderr[-2000:]}")
    return tuple(parse_error_codes(result.stdout))
