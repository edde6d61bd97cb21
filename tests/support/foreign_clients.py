"""The compatibility matrix's clients that are not Python: franz-go, Sarama and kafka-go (one
Go program, tests/clients/go) and KafkaJS (tests/clients/js), built and cached by
scripts/build-clients.sh (which setup runs). Each produces records through a bootstrap and
reads them back in a consumer group of its own library, and prints what it read.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from configuration.cache import cache_root
from tests.support.required_parts import Part, binary

REPO = Path(__file__).resolve().parents[2]
GO_LIBRARIES = ("franz-go", "franz-go-kip848", "sarama", "kafka-go")
Seen = list[tuple[str, dict[str, bytes]]]  # (value, headers) of each record read back


def _built(name: str) -> Path | None:
    """What the last build of the current sources wrote to `name`.path, if it is there."""
    try:
        path = Path((cache_root() / "clients" / f"{name}.path").read_text().strip())
    except OSError:
        return None
    return path if path.exists() else None


def _go_program() -> Path | None:
    return _built("go")


def _kafkajs() -> Path | None:
    return _built("js")


_BUILD = "scripts/build-clients.sh (setup runs it) has not built it"
GO_CLIENTS = Part(_go_program() is not None, f"the Go clients: {_BUILD}")
KAFKAJS = Part(_kafkajs() is not None and binary("node") is not None,
               f"KafkaJS and node: {_BUILD}, or node is missing")


def _read(result: subprocess.CompletedProcess[str], what: str) -> Seen:
    if result.returncode != 0:
        raise AssertionError(f"{what} exited {result.returncode}: {result.stderr[-2000:]}")
    seen: Seen = []
    for line in result.stdout.splitlines():
        record = json.loads(line)
        headers = {k: base64.b64decode(v or "") for k, v in (record["headers"] or {}).items()}
        seen.append((record["value"], headers))
    return seen


@dataclass(frozen=True)
class Secured:
    """TLS trusting `ca`, and SASL/SCRAM-SHA-512 as `user`: what the programs read from
    COMPAT_TLS_CA, COMPAT_SASL_USER and COMPAT_SASL_PASSWORD."""

    ca: Path
    user: str
    password: str

    def env(self) -> dict[str, str]:
        return {"COMPAT_TLS_CA": str(self.ca), "COMPAT_SASL_USER": self.user,
                "COMPAT_SASL_PASSWORD": self.password}


def _env(secured: Secured | None, **more: str) -> dict[str, str]:
    return {**os.environ, **(secured.env() if secured is not None else {}), **more}


def go_cell(library: str, bootstrap: str, topic: str, records: int, group: str,
            secured: Secured | None = None) -> Seen:
    """`library` (one of GO_LIBRARIES) produces `records` records and reads them back."""
    assert library in GO_LIBRARIES, library
    program = _go_program()
    assert program is not None, GO_CLIENTS.missing
    result = subprocess.run([str(program), library, bootstrap, topic, str(records), group],
                            capture_output=True, text=True, timeout=150, env=_env(secured))
    return _read(result, library)


def kafkajs_cell(bootstrap: str, topic: str, records: int, group: str,
                 secured: Secured | None = None) -> Seen:
    """KafkaJS produces `records` records and reads them back."""
    folder = _kafkajs()
    assert folder is not None, KAFKAJS.missing
    result = subprocess.run(
        [binary("node") or "node", str(REPO / "tests" / "clients" / "js" / "cell.js"),
         bootstrap, topic, str(records), group],
        capture_output=True, text=True, timeout=150, env=_env(secured, NODE_PATH=str(folder)))
    return _read(result, "kafkajs")


def versions() -> str:
    """The versions the Go program and KafkaJS pin (their go.mod and package.json)."""
    gomod = (REPO / "tests" / "clients" / "go" / "go.mod").read_text()
    pinned = dict(re.findall(r"^\s*(\S+) (v\S+)$", gomod, re.M))
    names = {"franz-go": "github.com/twmb/franz-go", "Sarama": "github.com/IBM/sarama",
             "kafka-go": "github.com/segmentio/kafka-go"}
    package = json.loads((REPO / "tests" / "clients" / "js" / "package.json").read_text())
    return ", ".join([f"{name} {pinned.get(module, 'unpinned')}" for name, module in names.items()]
                     + [f"KafkaJS {package['dependencies']['kafkajs']}"])
