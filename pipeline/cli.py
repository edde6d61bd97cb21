"""`herald pipeline batch|stream|report`: the analytics pipeline from the command line.

The `herald` command (its registry names `main` here) hands it everything after `pipeline`,
importing this module only then, so Herald's own start never imports Spark.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from configuration import ConfigError
from pipeline.config import load_pipeline_config

DESCRIPTION = """Herald's analytics pipeline on Spark.

Reads the topics Herald stamped (W3C traceparent, herald.parent links and herald.* audit
headers) with Spark's Kafka source, builds each trace's causal graph across topics (linked by
herald.parent, inferred and marked where a record names no parent), and writes under the
output folder: Parquet tables (hops, links, branches, flows, edges, pathways, audit; transit
and lag with --fetch-topic), summary.json and a self-contained report.html.

Settings come from the `pipeline:` section of a YAML file (--config; the proxy.yaml family),
then from flags. Spark runs on local[*] unless --master names a cluster (spark://HOST:PORT).
"""


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", type=Path, help="YAML file with a `pipeline:` section")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (brokers or Herald)")
    p.add_argument("--topics", help="comma-separated topics to read")
    p.add_argument("--terminal-topics", help="comma-separated topics where flows end")
    p.add_argument("--max-wait-ms", type=int, help="a hop waiting longer breaks its branch")
    p.add_argument("--time-source", choices=("herald", "broker"),
                   help="hop time: Herald's receive time (herald.time) or the broker timestamp")
    p.add_argument("--starting-offsets", help="earliest (default), latest, or Spark's JSON form")
    p.add_argument("--fetch-topic",
                   help="fetch_log observations topic: inference, transit latency and lag")
    p.add_argument("--inference-scope",
                   help="how an inferred parent's fetch observation is matched to the hop's "
                        "producer: host (default; the consumer's host is the producer's) or "
                        "client_id (host and client id), as trace_context's link.scope")
    p.add_argument("--time-bucket-s", type=int,
                   help="width of the time buckets of percentiles and lag over time (default 60)")
    p.add_argument("--output", "-o", help="output folder (default pipeline-out)")
    p.add_argument("--master", help="Spark master (default local[*])")
    p.add_argument("--driver-memory", help="Spark driver memory (default 1g)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="herald pipeline", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    batch = sub.add_parser("batch", help="read an offset range once and write every output",
                           description="Read the topics from --starting-offsets to "
                                       "--ending-offsets (earliest..latest) and write the "
                                       "tables, summary.json and report.html.")
    _common(batch)
    batch.add_argument("--ending-offsets", help="latest (default) or Spark's JSON form")
    stream = sub.add_parser("stream", help="Structured Streaming with a checkpoint",
                            description="Read the topics continuously; each flow is held "
                                        "until the watermark passes it, then analysed and "
                                        "merged into the outputs. A restart resumes from "
                                        "the checkpoint.")
    _common(stream)
    stream.add_argument("--checkpoint", help="checkpoint folder (required)")
    stream.add_argument("--trigger", choices=("available_now", "processing_time"),
                        help="available_now: read what is there and stop (default); "
                             "processing_time: a micro-batch every --interval-s")
    stream.add_argument("--interval-s", type=float, help="processing-time trigger period")
    stream.add_argument("--watermark-s", type=float,
                        help="event-time watermark: the newest hop time minus this many "
                             "seconds; hops behind it are dropped and counted")
    stream.add_argument("--flow-gap-s", type=float,
                        help="a flow is final once the watermark passes its last hop + this")
    stream.add_argument("--max-offsets-per-trigger", type=int,
                        help="records per micro-batch at most")
    stream.add_argument("--metrics-bind", metavar="HOST:PORT",
                        help="serve Prometheus metrics of the stream here (default "
                             "127.0.0.1:9465; '' turns them off; a port already taken is "
                             "reported and the stream runs without them)")
    report = sub.add_parser("report", help="redraw report.html from summary.json (no Spark)",
                            description="Write report.html from the summary.json of an "
                                        "output folder.")
    report.add_argument("folder", type=Path, help="the output folder of a batch or stream run")
    report.add_argument("--html", type=Path, help="where to write (default FOLDER/report.html)")
    return parser


def _overrides(args: argparse.Namespace) -> dict[str, object]:
    def split(text: str | None) -> list[str] | None:
        return None if text is None else [t.strip() for t in text.split(",") if t.strip()]

    out: dict[str, object] = {
        "bootstrap": args.bootstrap, "topics": split(args.topics),
        "terminal_topics": split(args.terminal_topics), "max_wait_ms": args.max_wait_ms,
        "time_source": args.time_source, "starting_offsets": args.starting_offsets,
        "output": args.output, "fetch_topic": args.fetch_topic, "master": args.master,
        "driver_memory": args.driver_memory, "time_bucket_s": args.time_bucket_s,
        "inference_scope": args.inference_scope,
    }
    if args.command == "batch":
        out["ending_offsets"] = args.ending_offsets
    else:
        out.update({"stream.checkpoint": args.checkpoint, "stream.trigger": args.trigger,
                    "stream.interval_s": args.interval_s,
                    "stream.watermark_s": args.watermark_s,
                    "stream.flow_gap_s": args.flow_gap_s,
                    "stream.max_offsets_per_trigger": args.max_offsets_per_trigger,
                    "stream.metrics_bind": args.metrics_bind})
    return out


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "report":
        from pipeline.report import report_from_summary

        summary = args.folder / "summary.json"
        if not summary.is_file():
            print(f"herald pipeline: {summary}: no summary (run batch or stream first)",
                  file=sys.stderr)
            return 2
        html = args.html or args.folder / "report.html"
        report_from_summary(summary, html)
        print(f"herald pipeline: report {html}")
        return 0
    try:
        config = load_pipeline_config(args.config, _overrides(args),
                                      streaming=args.command == "stream")
    except ConfigError as exc:
        for error in exc.errors:
            print(f"herald pipeline: invalid config: {error}", file=sys.stderr)
        return 2

    from pipeline.jobs import run_batch, start_stream
    from pipeline.session import SparkSettings, spark_session

    spark = spark_session(SparkSettings(master=config.master,
                                        driver_memory=config.driver_memory,
                                        shuffle_partitions=config.shuffle_partitions))
    try:
        if args.command == "batch":
            summary = run_batch(spark, config)
            print(json.dumps({"output": config.output, "records": summary["records"]["total"],
                              "untraced": summary["records"]["untraced"],
                              "flows": summary["flows"], "links": summary["links"]}))
        else:
            query = start_stream(spark, config)
            try:
                query.awaitTermination()
            except KeyboardInterrupt:
                query.stop()
            print(json.dumps({"output": config.output, "checkpoint": config.stream.checkpoint}))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
