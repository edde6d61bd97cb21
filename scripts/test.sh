#!/usr/bin/env bash
# Set up, then run the lint and the whole test suite (unit, property, differential, integration
# against real brokers). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
