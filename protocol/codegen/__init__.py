"""The generator of ``protocol/messages``, ``protocol/api_keys.py`` and the generated half of
``protocol/contracts`` (Kafka's error codes, the version thresholds the code relies on).

It reads the official message specs (JSON inside the kafka-clients jar of the Kafka releases
pinned in ``protocol.kafka_versions``) and Kafka's ``Errors`` enum, and writes straight-line
modules. It reads jars already on disk, from the folders it is given, and fetches nothing:
run it with ``python -m proxy.devtools.codegen``, which fetches the jars first (or with
``python -m protocol.codegen --libs DIR --legacy-libs DIR``). The generated files are
committed, and a test checks that they match what the generator produces. Nothing here is
imported at run time by the proxy.
"""
