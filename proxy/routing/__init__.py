"""Header-based routing: rules that send records to another topic or cluster, mirror, or refuse.

The pure parts (predicates, rules, the actions rules take, the origin seal, the partitioner,
the sequence map of idempotent producers) know nothing of trio or sockets and are tested with
bytes; `destinations` drives the real producers, `produce_filter` puts it all on the produce
path and `arrival` keeps what it needs of the records as they arrived, before the chains.
"""
