"""Herald's interceptor layer: pure code (no I/O) that reads and writes record headers.

The proxy builds the chains once from the configuration and calls them per partition::

    chains = build_chains(config["interceptors"], ProxyInfo(instance_id="herald-1"))
    outcome = chains.produce.process(topic, partition, batches, conn)
    chains.fetch.process(topic, partition, batches, conn)

Plugin authors subclass `Interceptor` (a stamping member also declares `Stamps` and gives
its columns); see docs/interceptors.md.
"""

from configuration import ConfigError, InvalidConfig
from interceptors.api import (
    DROP,
    KEEP,
    ColumnValue,
    Interceptor,
    NativeColumn,
    NoConfig,
    PerRecord,
    Stamps,
    Verdict,
)
from interceptors.chain import ChainMember, Chains, FetchChain, PartitionOutcome, ProduceChain
from interceptors.chains_from_yaml import build_chains
from interceptors.context import ConnectionInfo, ProxyInfo, RecordContext, TraceInfo
from interceptors.errors import INVALID_RECORD, UNKNOWN_SERVER_ERROR, RejectRecord
from interceptors.headers import HeaderBlock, Headers
from interceptors.stats import ChainStats, MemberStats

__all__ = [
    "DROP",
    "INVALID_RECORD",
    "KEEP",
    "UNKNOWN_SERVER_ERROR",
    "ChainMember",
    "ChainStats",
    "Chains",
    "ColumnValue",
    "ConfigError",
    "ConnectionInfo",
    "FetchChain",
    "HeaderBlock",
    "Headers",
    "Interceptor",
    "InvalidConfig",
    "MemberStats",
    "NoConfig",
    "PartitionOutcome",
    "NativeColumn",
    "PerRecord",
    "ProduceChain",
    "ProxyInfo",
    "RecordContext",
    "RejectRecord",
    "Stamps",
    "TraceInfo",
    "Verdict",
    "build_chains",
]
