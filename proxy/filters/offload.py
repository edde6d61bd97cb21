"""When a partition's work leaves the event loop: the sizes past which the members that run
over records (the interceptor chains, routing) hand a partition to a worker thread, so the
loop keeps serving other connections meanwhile."""

from __future__ import annotations

OFFLOAD_BYTES = 256 * 1024
"""Partitions at least this large are processed in a worker thread."""
OFFLOAD_RECORDS = 10_000
"""So are partitions of at least this many records (a chain costs about 1 us a record)."""
BULK_FACTOR = 8
"""For a chain whose members all declare what they read and append (`Chain.bulk`), batches
nobody watches are scanned and stamped natively, at well under a millisecond per MiB: the
byte threshold is this many times higher, since the hops to a worker thread and back would
cost more than the work (about 1 ms of CPU per MiB fetched through `drop_headers`). The
record threshold stays: records a member does watch still go one by one."""
ON_LOOP_DECOMPRESSED = 4 * 1024 * 1024
"""Smaller partitions are decompressed on the loop up to this size; one that turns out to be
larger is finished in a worker thread (a few KiB of zstd can hold megabytes)."""
