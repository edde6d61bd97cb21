"""The contracts Herald's packages share: names and numbers that one package writes and another
reads, defined once so that producer and consumer cannot drift apart.

* ``headers``: the record headers Herald writes and reads (audit, W3C trace context, the
  routing origin, the reserved prefix): the interceptors that stamp them, the proxy that routes
  and traces by them, and the analytics pipeline that reads them all import these names.
* ``fetch_log``: the layout of the observations the ``fetch_log`` interceptor publishes and the
  pipeline reads back.
* ``kafka_errors`` (generated): every Kafka error code, from Kafka's own ``Errors`` enum.
* ``features`` (generated): the first version of a message that has a feature the code depends
  on (topics named by id, KIP-951 node endpoints, ...), read from Kafka's message specs.

They live in ``protocol`` because it is the bottom layer: every package may import it, and it
imports nothing of Herald's. The generated modules are written by ``protocol.codegen`` (run
``python -m proxy.devtools.codegen``); a test checks that regenerating changes nothing.
"""
