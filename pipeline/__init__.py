"""Herald's analytics pipeline: PySpark jobs over the header-enriched topics.

Herald stamps every record with W3C trace context (`traceparent`) and audit headers
(`herald.*`). The pipeline reads those topics with Spark's Kafka source, turns each record into
a *hop*, builds the causal graph of each trace across topics (which record continues which:
`herald.parent` links, inference where a record names none), and reports per-edge and
per-pathway latency, broken branches, consumer lag and audit summaries (docs/pipeline.md).

Nothing here imports `proxy`: the pipeline runs wherever Spark runs, next to Herald or not.
Importing this package does not import PySpark; the modules that need it do.
"""
