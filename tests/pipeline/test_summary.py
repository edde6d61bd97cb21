"""The summary's counts (`pipeline.summary`): what lost parents touched, taken with the flag
and evidence counts the batch job and each micro-batch of the stream share (`tally`), and
link counts merged before the fetch evidence was split by match. Expected figures are worked
out here from the hops as written, not with the Spark code under test."""

from __future__ import annotations

from pipeline.config import PipelineConfig
from pipeline.graph import FETCH_CLIENT_ID, LEGACY_EVIDENCE, evidence_counts
from pipeline.summary import link_counts
from tests.support.pipeline.graph_log import Log, hops_df, trace


def test_legacy_fetch_evidence_counts_as_fetch_client_id() -> None:
    """Aggregates merged before `fetch` became `fetch_host`, `fetch_host_client_id` and
    `fetch_client_id` still hold `fetch`: it counts as the client-id match it was."""
    assert LEGACY_EVIDENCE == {"fetch": FETCH_CLIENT_ID}
    merged = {"header": 4, "fetch": 2, "fetch_client_id": 1, "fetch_host": 5, "time": 3,
              "unresolved": 1}
    assert evidence_counts(merged) == {"header": 4, "fetch_client_id": 3, "fetch_host": 5,
                                       "time": 3, "unresolved": 1}
    links = link_counts(merged, 1)
    assert links["by_evidence"] == {"header": 4, "fetch_host": 5, "fetch_host_client_id": 0,
                                    "fetch_client_id": 3, "time": 3}
    assert (links["linked"], links["inferred"], links["inferred_by_fetch"],
            links["inferred_by_time"], links["unresolved"]) == (4, 11, 8, 3, 1)


def test_tally_counts_what_lost_parents_touched(spark) -> None:
    """An incomplete root whose two children make two branches counts as one root; a hop that
    names one parent and lost another is no root, and its link is incomplete."""
    from pyspark.sql import functions as F

    from pipeline.flows import analyze
    from pipeline.summary import tally

    log = Log()
    lost: dict[tuple, tuple[int, list[str]]] = {}
    a = trace()  # a root that lost its parents, fanning out
    log.put(a, "tl.orders", 0, "svc-a")
    pay = log.put(a, "tl.pay", 10, "svc-b")
    lost[pay] = (2, ["evicted"])
    log.put(a, "tl.ship", 20, "svc-c", (pay,))
    log.put(a, "tl.fraud", 25, "svc-d", (pay,))
    b = trace()  # links into hops that lost another parent each
    order = log.put(b, "tl.orders", 100, "svc-a")
    pay = log.put(b, "tl.pay", 110, "svc-b", (order,))
    lost[pay] = (1, ["expired"])
    ship = log.put(b, "tl.ship", 120, "svc-c", (pay,))
    lost[ship] = (1, ["overflow"])
    c = trace()  # nothing lost
    order = log.put(c, "tl.orders", 200, "svc-a")
    log.put(c, "tl.pay", 210, "svc-b", (order,))
    log.put(None, "tl.orders", 300, "legacy")

    hops = hops_df(spark, log.hops)
    for (topic, partition, offset), (n, reasons) in lost.items():
        this = ((F.col("topic") == topic) & (F.col("partition") == partition)
                & (F.col("offset") == offset))
        hops = (hops.withColumn("parents_lost", F.when(this, F.lit(n).cast("long"))
                                .otherwise(F.col("parents_lost")))
                .withColumn("lost_reasons", F.when(this, F.array(*map(F.lit, reasons)))
                            .otherwise(F.col("lost_reasons"))))
    config = PipelineConfig(topics=["tl.orders", "tl.pay", "tl.ship", "tl.fraud"],
                            terminal_topics=["tl.ship", "tl.fraud"], max_wait_ms=1000)
    tables = analyze(hops, config)
    try:
        got = tally(tables)
    finally:
        tables.unpersist()
    # Branches: [orders] (stopped) and pay > ship, pay > fraud of a; orders > pay > ship of b;
    # orders > pay of c (stopped).
    assert got.branches == {"total": 5, "broken": 2, "stopped": 2, "slow": 0, "open": 0}
    assert got.flows == {"total": 3, "broken": 2, "stopped": 2, "slow": 0, "open": 0}
    assert got.evidence == {"header": 5} and got.unresolved == 0
    assert got.incomplete == {
        "hops": 3, "parents_lost": 4, "roots": 1, "links": 2, "branches": 3, "flows": 2,
        "by_reason": {"evicted": {"hops": 1, "links": 0, "branches": 2},
                      "expired": {"hops": 1, "links": 1, "branches": 1},
                      "overflow": {"hops": 1, "links": 1, "branches": 1}}}
