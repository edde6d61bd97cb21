"""The project's cache folder, one rule for everything Herald fetches once and keeps: the
Kafka jars (`proxy.devtools.kafka_dist`), Spark's Kafka connector (`pipeline.deps`), build tools.

It lives in `configuration`, which every package may import (the pipeline never imports
`proxy`), and `HERALD_CACHE_DIR` is read here alone.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """`$HERALD_CACHE_DIR`, else `.cache/` of the checkout, else `~/.cache/herald` (an
    installed package has no checkout). scripts/setup.sh follows the same rule."""
    env = os.environ.get("HERALD_CACHE_DIR")
    if env:
        return Path(env)
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").exists():
        return checkout / ".cache"
    return Path.home() / ".cache" / "herald"
