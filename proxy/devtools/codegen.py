"""``python -m proxy.devtools.codegen [--out DIR] [--check]``: regenerate ``protocol/messages``,
``protocol/api_keys.py`` and the generated half of ``protocol/contracts``.

The generator (``protocol.codegen``) reads jars and fetches nothing, since ``protocol`` imports
nothing of Herald's; this command gives it the jars of the pinned releases, fetched with Maven
into the cache on first use (`kafka_dist`). Development and tests only: the proxy never runs it.
`load_messages` and `render_all` are the generator's, bound to those jars, for the tests and
fuzzers that walk the message model.
"""

from __future__ import annotations

import sys

from protocol.codegen import __main__ as generator
from protocol.codegen import generate, model
from protocol.codegen.jars import KafkaLibs
from protocol.kafka_versions import KAFKA_LEGACY_VERSION, KAFKA_VERSION
from proxy.devtools.kafka_dist import kafka_libs


def pinned_libs() -> KafkaLibs:
    """The jar folders of both pinned releases, fetched if the cache lacks them."""
    return KafkaLibs(kafka_libs(KAFKA_VERSION), kafka_libs(KAFKA_LEGACY_VERSION))


def load_messages() -> dict[str, model.Message]:
    return model.load_messages(pinned_libs())


def render_all() -> dict[str, str]:
    return generate.render_all(pinned_libs())


def main(argv: list[str] | None = None) -> int:
    libs = pinned_libs()
    args = list(sys.argv[1:] if argv is None else argv)
    return generator.main(args + ["--libs", str(libs.newest), "--legacy-libs", str(libs.legacy)])


if __name__ == "__main__":
    sys.exit(main())
