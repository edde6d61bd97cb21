"""Header-based routing: rules that send records to another topic or cluster, mirror, or refuse.

The pure parts (predicates, rules, the partitioner, the sequence map of idempotent producers)
know nothing of trio or sockets and are tested with bytes; `destinations` drives the real
producers and `produce_filter` puts it all on the produce path.
"""
