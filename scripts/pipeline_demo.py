"""Traffic for trying the pipeline: four services through Herald (A → orders; B reads orders →
payments; F reads orders → fraud, for every third order; C reads payments → shipments, sending
a retried payment back to payments once), with trace context carried from hop to hop, a few
flows broken on purpose and a few records written straight to the broker without trace context.

    bash scripts/dev.sh       # herald dev with proxy.yaml: prints upstream=127.0.0.1:PORT
    .venv/bin/python scripts/pipeline_demo.py --herald localhost:19092 --broker 127.0.0.1:PORT

The broker address is the `upstream=` of Herald's ready line. Prints the topic names and the
`herald pipeline batch` command that reads them. The services are the ones the integration
tests play (tests/support/pipeline/scenario.py). They continue each trace (same trace id, a
span of their own) and name nothing else: Herald writes the links. proxy.yaml turns on
`trace_context`'s `link`, so Herald remembers the traced records each service fetched and
puts a `herald.parent` header naming them on what that service then produces. The services
all run in this process and reach Herald from one address, so proxy.yaml's scope is
`client_id`: each service's consumer and producer share a client id of their own (`svc-b`,
`svc-f`, ...), and a service's writes name only what it fetched, though B and F read the same
orders. The graph the batch job draws then has every edge linked and none inferred (the
summary's `links`); only the untraced legacy records are outside it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.pipeline.scenario import MAX_WAIT_MS, play, topic_names  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--herald", default="localhost:19092", help="Herald's bootstrap")
    parser.add_argument("--broker", required=True, help="the broker itself (Herald's upstream)")
    parser.add_argument("--tag", default=None, help="topic name suffix (default: random)")
    args = parser.parse_args()
    topics = topic_names(args.tag)
    played = play(args.herald, args.broker, topics)
    print(f"wrote {len(played.delivered)} records to {', '.join(topics.values())}")
    print(f".venv/bin/herald pipeline batch --bootstrap {args.broker} "
          f"--topics {','.join(topics.values())} "
          f"--terminal-topics {topics['shipments']},{topics['fraud']} "
          f"--max-wait-ms {MAX_WAIT_MS} --inference-scope client_id")
    return 0


if __name__ == "__main__":
    sys.exit(main())
