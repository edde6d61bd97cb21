"""The committed generated files are exactly what the generator produces from the pinned specs."""

from __future__ import annotations

import json
import pathlib

from protocol.codegen.jars import strip_comments
from protocol.codegen.model import Versions, camel_case, snake_case
from proxy.devtools.codegen import load_messages, main, render_all

REPO = pathlib.Path(__file__).resolve().parents[4]


def test_generated_files_are_up_to_date(tmp_path: pathlib.Path) -> None:
    assert main(["--out", str(tmp_path)]) == 0
    generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.py"))
    assert generated, "the generator wrote nothing"
    stale = [
        str(rel)
        for rel in generated
        if (REPO / rel).read_text(encoding="utf-8") != (tmp_path / rel).read_text(encoding="utf-8")
    ]
    assert not stale, f"regenerate with `python -m protocol.codegen`: {stale}"
    committed = {p.relative_to(REPO) for p in (REPO / "protocol" / "messages").glob("*.py")}
    assert committed == {rel for rel in generated if rel.parts[:2] == ("protocol", "messages")}


def test_generation_is_deterministic() -> None:
    assert render_all() == render_all()


def test_strip_comments_keeps_strings() -> None:
    text = '{"a": "http://x", // trailing\n  /* block */ "b": "\\"//\\""}\n// end'
    assert json.loads(strip_comments(text)) == {"a": "http://x", "b": '"//"'}


def test_versions_and_names() -> None:
    assert 5 in Versions.parse("3+") and 2 not in Versions.parse("3+")
    assert list(Versions.parse("1-3").range()) == [1, 2, 3]
    assert Versions.parse("none").empty
    assert str(Versions.parse("7")) == "7"
    assert snake_case("ThrottleTimeMs") == "throttle_time_ms"
    assert snake_case("ZkMigrationReady") == "zk_migration_ready"
    assert camel_case("IsrNodes") == "isrNodes"


def test_merged_versions_follow_the_right_spec() -> None:
    produce = load_messages()["ProduceRequest"]
    assert produce.versions == list(range(14))
    assert produce.spec_for(2) is produce.legacy
    assert produce.spec_for(3) is produce.newest
    v2 = [f.cf.py_name for f in produce.layout(2).fields]
    assert v2 == ["acks", "timeout_ms", "topic_data"]
    assert load_messages()["FetchResponse"].flexible_min_version == 12
