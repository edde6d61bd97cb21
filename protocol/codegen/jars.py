"""Where the Kafka message specs come from: the ``kafka-clients`` jar of a pinned release.

The specs are the JSON files under ``common/message/`` inside the jar. They carry ``//``
comments, which are stripped (outside string literals) before parsing.
"""

from __future__ import annotations

import json
import pathlib
import zipfile
from typing import Any


def kafka_libs_dir(version: str) -> pathlib.Path:
    """The folder holding every runtime jar of Kafka ``version`` (fetched with Maven, cached).

    Imported lazily: the generator is a development tool, and the download belongs to the
    proxy's distribution code rather than to the sans-I/O codec.
    """
    from proxy.devtools.kafka_dist import kafka_libs

    return pathlib.Path(kafka_libs(version))


def clients_jar(version: str) -> pathlib.Path:
    path = kafka_libs_dir(version) / f"kafka-clients-{version}.jar"
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


def read_specs(version: str) -> dict[str, dict[str, Any]]:
    """All message specs of Kafka ``version``, keyed by spec name (e.g. ``FetchRequest``)."""
    specs: dict[str, dict[str, Any]] = {}
    with zipfile.ZipFile(clients_jar(version)) as jar:
        for name in sorted(jar.namelist()):
            if name.startswith("common/message/") and name.endswith(".json"):
                spec = json.loads(strip_comments(jar.read(name).decode("utf-8")))
                specs[spec["name"]] = spec
    return specs
