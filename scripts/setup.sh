#!/usr/bin/env bash
# Idempotent setup: a virtualenv in .venv/ with Herald and its test tools from PyPI, and the
# Apache Kafka jars from Maven Central in .cache/. Fast when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in java mvn; do
  command -v "$tool" >/dev/null || { echo "setup: '$tool' is required (Java 17 and Maven)" >&2; exit 1; }
done
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.herald-installed
# The native stamper is compiled at install time: a change to its source reinstalls.
want=$(cat pyproject.toml setup.py protocol/_stamp.c | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test,pipeline]'
  echo "$want" > "$stamp"
fi
.venv/bin/python - <<'PY'
from protocol.kafka_versions import KAFKA_VERSION
from proxy.kafka_dist import kafka_libs
print(f"setup: Kafka {KAFKA_VERSION} jars in {kafka_libs(KAFKA_VERSION)}")
PY
# The analytics pipeline: Spark's Kafka connector, resolved from Maven Central by Spark's own
# package mechanism into the Ivy cache (pipeline/deps.py), and Chromium (Debian's package),
# which the tests use to render the HTML report.
.venv/bin/python -m pipeline.deps
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >/dev/null \
      || apt-get install -y -q -f --no-install-recommends chromium fonts-dejavu-core >/dev/null
  else
    echo "setup: chromium is missing; install Debian's 'chromium' package (report tests)" >&2
  fi
fi
