#!/usr/bin/env bash
# Set up, then run the lint and the whole test suite (unit, property, differential, integration
# against real brokers), then the native engine's tests under ASan and UBSan and its fuzz
# targets for a short while (scripts/sanitize.sh, docs/native-safety.md). Extra arguments go
# to pytest, and then only pytest runs; HERALD_SANITIZE=0 leaves the sanitizer part out.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
if [ $# -eq 0 ] && [ "${HERALD_SANITIZE:-1}" != 0 ]; then
  bash scripts/sanitize.sh
fi
