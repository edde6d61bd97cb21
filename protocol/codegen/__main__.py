"""``python -m protocol.codegen --libs DIR --legacy-libs DIR [--out DIR] [--check]``: (re)write
the generated files from the jars of the two pinned Kafka releases, which must be on disk
already (``python -m proxy.devtools.codegen`` fetches them and runs this)."""

from __future__ import annotations

import argparse
import pathlib
import sys

from protocol.codegen.generate import render_all
from protocol.codegen.jars import KafkaLibs
from protocol.kafka_versions import KAFKA_LEGACY_VERSION, KAFKA_VERSION

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m protocol.codegen", description=__doc__)
    parser.add_argument("--libs", type=pathlib.Path, required=True,
                        help=f"folder of the Kafka {KAFKA_VERSION} jars")
    parser.add_argument("--legacy-libs", type=pathlib.Path, required=True,
                        help=f"folder of the Kafka {KAFKA_LEGACY_VERSION} jars")
    parser.add_argument("--out", type=pathlib.Path, default=REPO_ROOT, help="repository root")
    parser.add_argument(
        "--check", action="store_true", help="only report files that differ; exit 1 if any"
    )
    args = parser.parse_args(argv)
    stale = []
    for rel, text in render_all(KafkaLibs(args.libs, args.legacy_libs)).items():
        path = args.out / rel
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(rel)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for rel in stale:
        print(("differs: " if args.check else "wrote: ") + rel)
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
