"""Routing metrics: per rule and destination cluster, and the state of every cluster.

Label sets are bounded by the configuration: rule names, cluster names, and a fixed set of
outcomes. Counters are touched once per routed batch and destination, not per record.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_ACK_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                30.0)

# outcomes of herald_routing_records_total
DELIVERED = "delivered"  # acknowledged by the destination
FAILED = "failed"  # the destination did not acknowledge in time, or refused
BEST_EFFORT = "best_effort"  # acks=0: sent, and nobody waits
SHADOW = "shadow"  # a shadow rule matched: what it would have done, nothing done
REJECTED = "rejected"  # a reject rule refused the record's partition
REFUSED = "refused_transactional"  # a transactional producer's records a rule would move
DUPLICATE = "retry_skipped"  # a client retry whose routed records had been delivered already


class RoutingStats:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.records = Counter(
            "herald_routing_records", "Records matched by routing rules, by what became of them",
            ["rule", "action", "cluster", "outcome"], registry=registry,
        )
        self.bytes = Counter(
            "herald_routing_bytes", "Key and value bytes of records routed to a destination",
            ["rule", "cluster"], registry=registry,
        )
        self.ack_seconds = Histogram(
            "herald_routing_ack_seconds",
            "Time from handing a routed batch to the destination's producer to its last ack",
            ["cluster"], buckets=_ACK_BUCKETS, registry=registry,
        )
        self.cluster_up = Gauge(
            "herald_cluster_up", "1 when the cluster answered Herald's last probe",
            ["cluster"], registry=registry,
        )

        self.journal_state = Gauge(
            "herald_routing_journal_state",
            "1 for the routing journal's state: off, waiting (opened at the first routed "
            "batch), on, failed",
            ["state"], registry=registry,
        )
        self.journal_bytes = Gauge(
            "herald_routing_journal_bytes", "Size of the routing journal file",
            registry=registry,
        )

    def count(self, rule: str, action: str, cluster: str, outcome: str, n: int) -> None:
        if n:
            self.records.labels(rule, action, cluster, outcome).inc(n)
