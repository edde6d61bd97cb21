"""The merged aggregates' files, `aggregates/N.json` after micro-batch N. A micro-batch starts
from its predecessor's file, never from the newest one, so a batch Spark replays rebuilds the
same file instead of adding twice; a few files are kept, the newest being the one that counts."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.stream.aggregates import Aggregates

KEEP_AGGREGATES = 3  # files of merged aggregates kept (the newest is the one that counts)


def _batch_ids(folder: Path) -> list[int]:
    return sorted(int(p.stem) for p in folder.glob("*.json") if p.stem.isdigit())


def latest_aggregates(folder: Path, before: int) -> Aggregates:
    """The merged aggregates of the newest batch before `before` (empty if none)."""
    ids = [i for i in _batch_ids(folder) if i < before]
    if not ids:
        return Aggregates()
    return Aggregates.from_json(json.loads((folder / f"{ids[-1]}.json").read_text()))


def _write_json(path: Path, data: object) -> None:
    """Write `data` as JSON, atomically: a crash leaves the old file or the new one."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    tmp.replace(path)


def save_aggregates(folder: Path, agg: Aggregates) -> None:
    """Write `agg` as its batch's file, and drop all but the newest `KEEP_AGGREGATES`."""
    _write_json(folder / f"{agg.batch_id}.json", agg.to_json())
    for old in _batch_ids(folder)[:-KEEP_AGGREGATES]:
        (folder / f"{old}.json").unlink(missing_ok=True)
