"""The continuous stream: hops held per trace in Spark's state store until their flow is
finished, the finished flows analysed by the batch job's own functions, and the aggregates
merged micro-batch by micro-batch (docs/pipeline.md, "Streaming").

Why this shape. A flow spans micro-batches, so per-flow results cannot be appended as records
arrive; recomputing everything after each micro-batch costs O(all hops) per batch. Instead:

1. **Hold** (`applyInPandasWithState`, keyed by `key`, event-time timeout). A hop's key is a
   hash bucket of its trace id, so that one call decides for many traces (`pipeline.flow_hold`,
   which says why). A flow's hops stay in the state store until the event-time watermark (latest
   event time seen minus `stream.watermark_s`) passes its last hop time plus
   `stream.flow_gap_s`; then the flow is *finalised*: its hops are emitted together, and a small
   tombstone remembers the trace for `stream.late_retention_s` so that a hop arriving for it
   afterwards is recognised as *late* (emitted apart, status `late`, counted, never merged into
   the finalised figures). Rows behind the watermark itself are dropped by Spark before they
   reach the state and counted by Spark (`numRowsDroppedByWatermark`). Untraced records take no
   part in any flow and go straight through.
2. **Bound.** A flow that grows past `stream.max_flow_hops`, or whose first hop is older than
   the watermark by `stream.max_flow_age_s`, is finalised at once (status `evicted`, counted).
   So the state holds at most the flows of the last `flow_gap_s + watermark_s` of event time
   (each of at most `max_flow_hops` hops), plus tombstones of a few numbers each.
3. **Observations** (with `fetch_topic`). The fetch topic is a second Kafka source, unioned
   with the hops before the watermark, so one watermark covers both (an observation's event
   time is its fetch time). Each traced observation is held with its trace's hops (kind
   `fetch`) and emitted with the finalised flow: the evidence `links_of` infers from, exactly
   the observations batch would match (same trace, fetched before the child). One arriving
   for a finalised trace is dropped and counted (`late_fetches`); a trace that only ever had
   observations emits nothing. Transit and lag need every record and fetch of a partition in
   time order, across flows: a join of observations to hops would have to keep or read again
   every hop. So each hop also has a twin row keyed by its partition (`\x00topic\x00p`, which
   no hex trace id equals) carrying only its time, each observation of a topic read a row with
   the same key, and that partition's state (`pipeline.fetch_clock`) keeps the record times
   and fetches above the watermark, the running newest record time and, per reader, the
   offsets counted (merged ranges). As the watermark passes, it releases them in time order:
   each reader's first fetch of a record with its transit (`f - h`) and lag. An observation
   without `h` (a record written past Herald; or any under `time_source: broker`) takes the
   time of its record from the clock, which holds each record's offset until the watermark
   passes it; one whose record the clock no longer holds (a consumer reading older records
   than the watermark's delay) is counted (`no_record_time`) and left to batch.
4. **Analyse** (`foreachBatch`). The hops emitted by a micro-batch are exactly the finalised
   flows; `pipeline.flows.analyze`, the batch job's code, builds their graph, branches and
   flows. So the stream and the batch share one definition of the causal graph. Links,
   branches, flows and hops are written per micro-batch (`<table>/batch_id=N/`, overwritten
   if Spark replays the batch).
5. **Merge.** Counts add exactly; latency percentiles merge as sketches (`pipeline.sketch`,
   relative error <= `stream.accuracy` against the batch job's exact ones). The merged
   aggregates after batch N are one small JSON file (`aggregates/N.json`), built from
   batch N-1's file and batch N's rows, so a replayed batch rebuilds the same file instead of
   adding twice. Edges, pathways, audit, transit, lag, the summary and the report are redrawn
   from it.

6. **Serve.** The merged aggregates of each micro-batch also go to the Prometheus exporter
   (`pipeline.stream_metrics`), which serves them from the driver when scraped.

A micro-batch therefore costs time proportional to the records and observations it brought
and the flows it finalised, plus the small aggregates; never to all hops so far.

The package, one job per module:

- `rows`: the stateful operator's rows (their columns, kinds and statuses), which the sources
  shape and the hold emits.
- `sources`: the Kafka sources (records, fetch observations) as the operator's rows, and the
  held stream over them (steps 1 and 3: keys, watermark, the operator).
- `hold`: the operator's per-key function, on the executors: a bucket of traces or a
  partition's clock, and what it emits.
- `aggregates`: the merged aggregates as typed values, and their JSON (`aggregates/N.json`).
- `figures`: what one micro-batch brings to the merge, collected from its tables in Spark.
- `merge`: those figures added to the aggregates (step 5), in plain Python.
- `store`: the aggregates files: the predecessor's read, the new one written atomically.
- `tables`: the merged aggregates as the batch job's tables, written as Parquet.
- `summary`: `summary.json` from the merged aggregates.
- `progress`: Spark's progress per micro-batch (`progress.jsonl`) and the listener that
  writes it and feeds the exporter.
- `micro_batch`: the `foreachBatch` function (steps 4 to 6).
- `query`: starting the query (`start_stream`).
"""
