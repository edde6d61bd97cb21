"""The generator of ``protocol/messages`` and ``protocol/api_keys.py``.

It reads the official message specs (JSON inside the kafka-clients jar of the Kafka releases
pinned in ``protocol.kafka_versions``) and writes straight-line codec modules. Run it with
``python -m protocol.codegen``; the generated files are committed, and a test checks that they
match what the generator produces. Nothing here is imported at run time by the proxy.
"""
