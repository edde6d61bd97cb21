"""Reading Herald's YAML file: every registered section, each by the package that owns it, and
every error of every section reported together.

`herald check` and the commands that serve from the file (`run`, `dev`) read it here, so
what one accepts the other accepts, and both refuse a bad file the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from configuration import ConfigError, ErrorCollector, read_yaml
from herald.registry import SECTIONS, NotInstalled, Section, resolve


def read_sections(path: Path, sections: tuple[Section, ...] = SECTIONS) -> dict[str, Any]:
    """The parsed value of each section of the file at `path`, by section name (None for a
    keyed section the file does not have, or whose package is not installed here).

    Raises one `ConfigError` whose messages each start with the file's name: the file's own
    error when it cannot be read or is not YAML, else every error of every section, each
    naming its YAML path (`FILE: listen.colour: unknown key`).
    """
    doc = read_yaml(path)
    claimed = {s.key for s in sections if s.key is not None}
    errors = ErrorCollector()
    values: dict[str, Any] = {}
    for section in sections:
        if section.key is None:
            rest = ({k: v for k, v in doc.items() if k not in claimed}
                    if isinstance(doc, dict) else doc)
            args: tuple[Any, ...] = (rest, path)
        elif isinstance(doc, dict) and doc.get(section.key) is not None:
            args = (doc[section.key], section.key)
        else:
            values[section.name] = None
            continue
        try:
            read = resolve(section.read)
        except NotInstalled:
            values[section.name] = None
            continue
        values[section.name] = errors.attempt(read, *args)
    if errors.errors:
        raise ConfigError(*(f"{path}: {error}" for error in errors.errors))
    return values


def report(error: ConfigError) -> int:
    """Print `error` of `read_sections` on stderr, one message per line, and return the exit
    status of a refused file, 1."""
    for message in error.errors:
        print(message, file=sys.stderr)
    return 1
