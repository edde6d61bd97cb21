"""Traffic for trying the pipeline: three services (A → orders, B → payments, C → shipments)
through Herald, with trace context carried from hop to hop, a few flows broken on purpose and a
few records written straight to the broker without trace context.

    .venv/bin/python scripts/pipeline_demo.py --herald localhost:19092 --broker 127.0.0.1:PORT

The broker address is the `upstream=` of Herald's ready line. Prints the topic names and the
`herald pipeline batch` command that reads them. The services are the ones the integration
tests play (tests/pipeline/scenario.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.pipeline.scenario import MAX_WAIT_MS, play, topic_names  # noqa: E402


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
          f"--topics {','.join(topics.values())} --terminal-topics {topics['shipments']} "
          f"--max-wait-ms {MAX_WAIT_MS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
