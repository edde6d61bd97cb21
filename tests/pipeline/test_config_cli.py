"""Configuration (YAML-path errors, flags over the file), the `herald pipeline` command, and
the header parsing rules against Herald's own traceparent check."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from configuration import ConfigError
from interceptors.tracing import parse_traceparent
from pipeline.config import load_pipeline_config
from pipeline.hops import to_hops
from proxy.config.proxy_yaml import load_config
from tests.support.herald_process import REPO

HERALD = [sys.executable, "-m", "herald"]


def _write(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "herald.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_pipeline_section_and_flags(tmp_path: Path) -> None:
    herald = yaml.safe_load((REPO / "proxy.yaml").read_text())
    path = _write(tmp_path, {**herald, "pipeline": {
        "topics": ["orders", "payments"], "terminal_topics": ["payments"],
        "max_wait_ms": 500, "stream": {"trigger": "processing_time", "interval_s": 2}}})
    config = load_pipeline_config(path, {"bootstrap": "k:9092", "stream.checkpoint": "/c",
                                         "max_wait_ms": None})
    assert config.topics == ["orders", "payments"] and config.max_wait_ms == 500
    assert config.bootstrap == "k:9092" and config.master == "local[*]"
    assert config.inference_scope == "host"  # matched as Herald's link memory keys a service
    assert load_pipeline_config(path, {"inference_scope": "client_id"}).inference_scope == \
        "client_id"
    assert (config.stream.trigger, config.stream.interval_s, config.stream.checkpoint) == (
        "processing_time", 2, "/c")
    assert config.stream.metrics_bind == "127.0.0.1:9465"  # on by default, on loopback
    off = load_pipeline_config(path, {"stream.metrics_bind": ""})
    assert off.stream.metrics_bind == ""
    # The same file still configures Herald: it leaves the pipeline section alone.
    assert load_config(path).listen.bootstrap.port == 19092


@pytest.mark.parametrize("section, message", [
    ({"topics": ["a"], "stream": {"trigger": "sometimes"}}, "pipeline.stream.trigger:"),
    ({"topics": ["a"], "stream": {"accuracy": 1.5}}, "pipeline.stream.accuracy: must be in"),
    ({"topics": ["a"], "stream": {"flow_gap_s": 0}}, "pipeline.stream.flow_gap_s: must be > 0"),
    ({"topics": ["a", "b c"]}, "pipeline.topics[1]: not a topic name"),
    ({"topics": ["a"], "max_wait_ms": "soon"}, "pipeline.max_wait_ms:"),
    ({"topics": ["a"], "max_wait_ms": 0}, "pipeline.max_wait_ms: must be > 0"),
    ({"topics": ["a"], "terminal": ["b"]}, "pipeline.terminal"),
    ({"topics": ["a"], "inference_scope": "pod"}, "pipeline.inference_scope: expected one of"),
    ({}, "pipeline.topics: required"),
    ({"topics": ["a"], "stream": {"metrics_bind": "9465"}},
     "pipeline.stream.metrics_bind: expected HOST:PORT or ''"),
    ({"topics": ["a"], "stream": {"metrics_top": 0}}, "pipeline.stream.metrics_top: must be > 0"),
])
def test_bad_settings_name_their_yaml_path(tmp_path: Path, section: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_pipeline_config(_write(tmp_path, {"pipeline": section}))
    assert str(info.value).startswith(message), str(info.value)


def test_every_bad_setting_is_reported_at_once(tmp_path: Path) -> None:
    path = _write(tmp_path, {"pipeline": {"time_source": "sundial", "max_wait_ms": 0,
                                          "stream": {"trigger": "sometimes"}}})
    with pytest.raises(ConfigError) as info:
        load_pipeline_config(path, streaming=True)
    assert [e.split(":")[0] for e in info.value.errors] == [
        "pipeline.time_source", "pipeline.stream.trigger", "pipeline.topics",
        "pipeline.stream.checkpoint"]


def test_unreadable_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read"):
        load_pipeline_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("pipeline: [")
    with pytest.raises(ConfigError, match=r"bad\.yaml: not valid YAML"):
        load_pipeline_config(bad)


def test_cli_help_errors_and_report(tmp_path: Path, batch_run) -> None:
    run = lambda *a: subprocess.run([*HERALD, *a], cwd=REPO, capture_output=True,  # noqa: E731
                                    text=True, timeout=120)
    top = run("--help")
    assert top.returncode == 0 and "pipeline" in top.stdout
    helps = run("pipeline", "--help")
    assert helps.returncode == 0
    for word in ("batch", "stream", "report", "local[*]"):
        assert word in helps.stdout
    assert "--checkpoint" in run("pipeline", "stream", "--help").stdout
    bad = run("pipeline", "batch", "--config", str(_write(tmp_path, {"pipeline": {
        "topics": ["a"], "time_source": "sundial"}})))
    assert bad.returncode == 2 and "pipeline.time_source:" in bad.stderr
    missing = run("pipeline", "stream", "--topics", "a")
    assert missing.returncode == 2 and "pipeline.stream.checkpoint: required" in missing.stderr
    # `report` redraws the HTML from summary.json alone.
    config, _ = batch_run
    html = tmp_path / "again.html"
    done = run("pipeline", "report", config.output, "--html", str(html))
    assert done.returncode == 0, done.stderr
    assert html.read_text() == (Path(config.output) / "report.html").read_text()


def test_herald_itself_never_imports_spark(tmp_path: Path) -> None:
    """`herald run` reads the file's `pipeline:` section as `check` does (pipeline/config.py,
    which imports no Spark), then loads the proxy: Spark is still not loaded."""
    herald = yaml.safe_load((REPO / "proxy.yaml").read_text())
    path = _write(tmp_path, {**herald, "pipeline": {"topics": ["a"]}})
    code = ("import sys; from herald import cli, registry, sections; "
            "cmd = next(c for c in registry.COMMANDS if c.name == 'run'); "
            f"args = cli.command_parser(cmd).parse_args(['-c', {str(path)!r}]); "
            "read = sections.read_sections(args.config); registry.resolve(cmd.run); "
            "import proxy.server; "
            "print(read['pipeline'].topics, 'pyspark' in sys.modules, "
            "'pipeline.cli' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "['a'] False False", out.stderr


TRACEPARENTS = [
    b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
    b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # uppercase
    b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
    b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero parent
    b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff
    b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # v00 has no more
    b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future",  # later versions may
    b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
    b"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # short
    b"garbage", b"", None,
]


def test_hops_read_traceparent_as_herald_does(spark) -> None:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType([
        StructField("key", BinaryType()), StructField("value", BinaryType()),
        StructField("topic", StringType()), StructField("partition", IntegerType()),
        StructField("offset", LongType()), StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField("headers", ArrayType(header)),
    ])
    when = datetime(2026, 1, 2, 3, 4, 5)
    rows = [(b"k", b"v", "t", 0, i, when, 0, [("x", b"1"), ("traceparent", tp),
                                             ("traceparent", TRACEPARENTS[0])])
            for i, tp in enumerate(TRACEPARENTS)]
    rows.append((None, b"v", "t", 0, 99, when, 1, None))  # no headers at all
    cfg = load_pipeline_config(None, {"topics": ["t"]})
    hops = {r.offset: r for r in to_hops(spark.createDataFrame(rows, schema), cfg).collect()}
    for i, tp in enumerate(TRACEPARENTS):
        want = parse_traceparent(tp)  # the first traceparent counts, as OpenTelemetry reads
        assert (hops[i].trace_id, hops[i].parent_span) == (
            (want.trace_id, want.parent_id) if want else (None, None)), tp
        assert hops[i].size == 1 + 1 + 2 + 11 + len(tp or b"") + 11 + 55  # key, value, headers
    assert hops[99].trace_id is None and hops[99].size == 1
    assert hops[99].timestamp_type == "log_append" and hops[0].timestamp_type == "create"
    assert hops[0].timestamp_ms == int(when.replace(tzinfo=UTC)
                                       .timestamp() * 1000)
