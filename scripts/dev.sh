#!/usr/bin/env bash
# Set up, then run `herald dev`: a local Kafka broker with Herald in front, configured by proxy.yaml.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >&2
exec .venv/bin/herald dev "$@"
