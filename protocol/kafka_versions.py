"""The Apache Kafka releases Herald is built and tested against, pinned in one place.

`KAFKA_VERSION` is the default broker for `herald dev` and the test suite, and the newest
source of the protocol message specs; `KAFKA_LEGACY_VERSION` is the latest 3.9.x, whose specs
still describe the old versions that 4.x dropped (KIP-896) but 3.9 brokers accept.
`KAFKA_TESTED_VERSIONS` are the broker and Java client releases the compatibility tests run
(tests/integration/compat), newest first: the pinned one, the previous 4.x, the latest 3.9.x.
"""

KAFKA_VERSION = "4.4.0"
KAFKA_PREVIOUS_VERSION = "4.3.1"
KAFKA_LEGACY_VERSION = "3.9.2"
KAFKA_TESTED_VERSIONS = (KAFKA_VERSION, KAFKA_PREVIOUS_VERSION, KAFKA_LEGACY_VERSION)
