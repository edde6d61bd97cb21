"""The chain engine: runs the members of a chain over the record batches of one partition.

The proxy calls `ProduceChain.process` for each partition of a Produce request and
`FetchChain.process` for each partition of a Fetch response. Everything else here serves
those two calls, under the hot-path rules, one job per module:

* `planning`: members that do not apply to the topic and client id are filtered once per
  (topic, client id) and cached (`Plan`), so a partition no member wants costs a dict lookup
  and touches no batch. A chain of read-only members (``needs = "read"``) scans headers
  without building record objects and can never mark a batch modified.
* `columns`: stamping members (`Stamps`: the built-in `trace_context`, `audit`,
  `insert_header`, and any plugin that declares it) are called only for records carrying a
  header they watch; every other record gets their columns for the batch
  (`Interceptor.columns`), prepared once for records and for whole batches.
* `batch_path`: when no record of a batch is watched and every per-record column can be made
  in bulk (`PerRecord.many`), the batch is *stamped* in one pass without being parsed into
  records; otherwise its records go one by one.
* `record_path`: changes are tracked per record (`Headers`) and applied at the end of each
  batch, only for records that really changed; a batch nobody changed keeps its original
  bytes. When every member stamps, a record none of them watches takes the *append path*.
  Bytes, counters and traces of the fast paths are those of the record path, which a chain
  built with ``fast_paths=False`` takes for every record.
* `shadow`: shadow members (`ChainMember.shadow`) run on a copy of each record's headers and
  are counted as if live, but nothing they do reaches the records, the traces or the outcome.
* `failures`: a member that raises never takes the proxy down; it is counted and its
  `on_error` policy decides (``reject``, ``pass`` or ``drop``).
* `run`: `process` may run in several threads at once; each run counts into counters of its
  own, merged into the chain's under a lock when it ends; members keep their per-batch state
  in the run's context (`RecordContext.memo`). A plan with a member that is not `concurrent`
  reports `serial`, and the caller then runs it one at a time.
* `chains`: the chain classes composing all of that, and the produce chain's outcome.

Control batches (transaction markers) and legacy (magic 0/1) chunks are never touched. The
names below are the engine's interface; the modules' other names are its own.
"""

from interceptors.chain.chains import OK, Chains, FetchChain, PartitionOutcome, ProduceChain
from interceptors.chain.planning import ChainMember

__all__ = ["OK", "ChainMember", "Chains", "FetchChain", "PartitionOutcome", "ProduceChain"]
